//! `report.html` in a real browser: headless Chromium (Debian's `chromium`) opens a copy of the
//! page with a checking script appended, and dumps the DOM after the load event; the script
//! records every image (decoded or not) and every element that sticks out of the page's column.
//! A second run keeps a screenshot of the page itself as a test artifact.
//!
//! Without Chromium the checks are skipped with a note, unless `BERTPIPE_REQUIRE_CHROMIUM` is
//! set (`.ci/run` sets it after installing Chromium): then a missing browser fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the page looked like once loaded.
#[derive(Debug)]
pub struct Rendered {
    pub width: f64,
    pub scroll_width: f64,
    /// `(alt, loaded)`: loaded when decoded with a width above 0.
    pub images: Vec<(String, bool)>,
    /// Elements wider than, or outside of, the page's `<main>` column.
    pub overflow: Vec<String>,
}

impl Rendered {
    /// Panics naming what is wrong: an image that did not load, a page wider than the window,
    /// an element outside the column.
    #[track_caller]
    pub fn assert_clean(&self, what: &str) {
        let broken: Vec<&String> = self.images.iter().filter(|(_, ok)| !ok).map(|(alt, _)| alt).collect();
        assert!(broken.is_empty(), "{what}: images that did not load: {broken:?}");
        assert!(
            self.scroll_width <= self.width + 1.0,
            "{what}: the page is {} px wide in a {} px window",
            self.scroll_width,
            self.width
        );
        assert!(self.overflow.is_empty(), "{what}: elements outside the column: {:#?}", self.overflow);
    }
}

/// The browser to use: `BERTPIPE_CHROMIUM`, else the first of chromium, chromium-browser,
/// google-chrome on PATH. `None` (with a note) when there is none and none is required.
pub fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BERTPIPE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    if std::env::var_os("BERTPIPE_REQUIRE_CHROMIUM").is_some() {
        panic!("BERTPIPE_REQUIRE_CHROMIUM is set but no chromium is on PATH (apt-get install chromium)");
    }
    eprintln!("note: no chromium on PATH; report.html is not rendered (apt-get install chromium)");
    None
}

/// The flags of a headless, offline, throw-away browser: no sandbox (CI runs as root), no GPU,
/// nothing fetched in the background, a fresh profile.
fn headless(browser: &Path, profile: &Path, width: u32, height: u32) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--virtual-time-budget=10000",
    ]);
    c.arg(format!("--user-data-dir={}", profile.display()));
    c.arg(format!("--window-size={width},{height}"));
    c
}

/// Appended to a copy of the page: runs after every image has loaded or failed.
const CHECK: &str = r#"<script>
window.addEventListener('load', () => {
  const out = { width: document.documentElement.clientWidth,
                scroll_width: document.documentElement.scrollWidth, images: [], overflow: [] };
  for (const img of document.images) out.images.push([img.alt, img.complete && img.naturalWidth > 0]);
  const main = document.querySelector('main');
  if (main) {
    const col = main.getBoundingClientRect();
    // Inside a box that scrolls sideways, wide content is reachable, not spilled.
    const inScroller = (el) => {
      for (let p = el.parentElement; p && p !== main; p = p.parentElement)
        if (getComputedStyle(p).overflowX !== 'visible') return true;
      return false;
    };
    for (const el of main.querySelectorAll('*')) {
      if (inScroller(el)) continue;
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      // Outside the column, or content spilling out of a box that does not scroll.
      const spills = el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX === 'visible';
      if (r.right > col.right + 1 || r.left < col.left - 1 || spills)
        out.overflow.push(el.tagName + ' "' + (el.textContent || '').trim().slice(0, 50) + '" ' + Math.round(r.left) + '..' + Math.round(r.right) + ' in ' + Math.round(col.left) + '..' + Math.round(col.right));
    }
  }
  const pre = document.createElement('pre');
  pre.id = 'bertpipe-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"#;

/// Loads `page` in a `width`-pixel window and reports what the checking script saw.
pub fn render(browser: &Path, page: &Path, width: u32) -> Rendered {
    let scratch = tempfile::tempdir().unwrap();
    let html = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    let at = html.rfind("</body>").unwrap_or_else(|| panic!("{}: no </body>", page.display()));
    let checked = scratch.path().join("checked.html");
    std::fs::write(&checked, format!("{}{CHECK}{}", &html[..at], &html[at..])).unwrap();
    let url = format!("file://{}", checked.display());
    let o =
        headless(browser, &scratch.path().join("profile"), width, 900).arg("--dump-dom").arg(&url).output().unwrap();
    let dom = String::from_utf8_lossy(&o.stdout);
    let start = dom.find("<pre id=\"bertpipe-check\">").unwrap_or_else(|| {
        panic!(
            "{}: the checking script left nothing (exit {:?}):\n{}",
            browser.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let body = &dom[start + "<pre id=\"bertpipe-check\">".len()..];
    let json = &body[..body.find("</pre>").expect("</pre>")];
    let json = json.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    Rendered {
        width: v["width"].as_f64().unwrap(),
        scroll_width: v["scroll_width"].as_f64().unwrap(),
        images: v["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (i[0].as_str().unwrap_or("").to_string(), i[1].as_bool().unwrap_or(false)))
            .collect(),
        overflow: v["overflow"].as_array().unwrap().iter().map(|s| s.as_str().unwrap_or("").to_string()).collect(),
    }
}

/// Where screenshots are kept: `BERTPIPE_TEST_ARTIFACTS`, else `$CARGO_TARGET_DIR/test-artifacts`
/// (`target/test-artifacts` without it).
pub fn artifacts() -> PathBuf {
    let dir = match std::env::var_os("BERTPIPE_TEST_ARTIFACTS") {
        Some(d) => PathBuf::from(d),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| super::root().join("target"))
            .join("test-artifacts"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A full-width screenshot of `page` (the page as written, no script) at `shot`; checks that it
/// is a PNG of that width with more than one colour in it.
pub fn screenshot(browser: &Path, page: &Path, shot: &Path) {
    let scratch = tempfile::tempdir().unwrap();
    let url = format!("file://{}", std::fs::canonicalize(page).unwrap().display());
    let o = headless(browser, &scratch.path().join("profile"), 1280, 3000)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        shot.is_file(),
        "no screenshot from {} (exit {:?}): {}",
        browser.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.width, 1280, "{}", shot.display());
    let px = info.color_type.samples();
    let first = &buf[..px];
    assert!(buf[..info.buffer_size()].chunks(px).any(|p| p != first), "{}: a blank screenshot", shot.display());
}

/// Renders `page` at a laptop's width and at 500 px (the narrowest window headless Chromium
/// lays out; a phone's is about 400), asserts it is clean at both, keeps a
/// screenshot named `name.png` among the artifacts, and returns the laptop rendering.
pub fn check_page(page: &Path, name: &str) -> Option<Rendered> {
    let browser = chromium()?;
    let wide = render(&browser, page, 1280);
    wide.assert_clean(&format!("{} at 1280 px", page.display()));
    render(&browser, page, 500).assert_clean(&format!("{} at 500 px", page.display()));
    let shot = artifacts().join(format!("{name}.png"));
    screenshot(&browser, page, &shot);
    eprintln!("screenshot of {}: {}", page.display(), shot.display());
    Some(wide)
}
