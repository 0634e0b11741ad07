//! A YAML tree that remembers where every node came from, so configuration errors can name
//! `file:line:column`. Parsed with `saphyr-parser` events; scalars resolve like YAML 1.2's core
//! schema, then the tree converts to `serde_json::Value` for typed deserialisation.
//!
//! An alias copies its anchor's whole tree, so a few hundred bytes of anchors and aliases can
//! stand for billions of nodes ("billion laughs"). [`parse`] bounds what aliases may make in one
//! document ([`MAX_ALIAS_NODES`] nodes, [`MAX_ALIAS_BYTES`] bytes of text) and how deep lists
//! and mappings may nest ([`MAX_DEPTH`]), and refuses the alias or the opening bracket that
//! crosses a bound at its line and column. No configuration comes near these bounds.

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Number, Value};

/// The most nodes that aliases may make in one document, all aliases together (an alias makes
/// as many nodes as its anchor holds, counting those its own aliases made).
pub const MAX_ALIAS_NODES: usize = 100_000;
/// The most bytes of text (strings and mapping keys) that aliases may copy in one document.
pub const MAX_ALIAS_BYTES: usize = 10_000_000;
/// The deepest lists and mappings may nest, the document's own mapping being level 1.
pub const MAX_DEPTH: usize = 128;

/// 1-based line and column of a node in its source. A node a `--set` wrote has no line of a
/// file: line 0, and the override's index + 1 as its column ([`Pos::of_override`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
    /// Which file the line and column are of, in a document put together from more than one
    /// (an experiment stage's `base:` file with the stage's keys set over it): 0 the file being
    /// read, another number a file it included, as the includer numbered it
    /// ([`Node::read_from`]) — so an error is reported against the file its line is in.
    pub doc: u32,
}

impl Pos {
    /// Line `line`, column `col` of the file being read.
    pub fn at(line: usize, col: usize) -> Pos {
        Pos { line, col, doc: 0 }
    }

    /// Where the `index`-th `--set` of a command line put a value.
    pub fn of_override(index: usize) -> Pos {
        Pos::at(0, index + 1)
    }

    /// The index of the `--set` that wrote the node here, if one did.
    pub fn override_index(self) -> Option<usize> {
        (self.line == 0 && self.col > 0).then(|| self.col - 1)
    }
}

#[derive(Debug, Clone)]
pub enum Node {
    Scalar(Value, Pos),
    Seq(Vec<Node>, Pos),
    /// Keys keep their own position so "unknown field" points at the key.
    Map(Vec<(String, Pos, Node)>, Pos),
}

#[derive(Debug, Clone)]
pub struct YamlError {
    pub pos: Pos,
    pub message: String,
}

impl Node {
    pub fn pos(&self) -> Pos {
        match self {
            Node::Scalar(_, p) | Node::Seq(_, p) | Node::Map(_, p) => *p,
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            Node::Scalar(v, _) => v.clone(),
            Node::Seq(items, _) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Map(entries, _) => {
                let mut m = Map::new();
                for (k, _, v) in entries {
                    m.insert(k.clone(), v.to_value());
                }
                Value::Object(m)
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries, _) => entries.iter().find(|(k, _, _)| k == key).map(|(_, _, v)| v),
            _ => None,
        }
    }

    /// Position of `key` itself inside this mapping.
    pub fn key_pos(&self, key: &str) -> Option<Pos> {
        match self {
            Node::Map(entries, _) => entries.iter().find(|(k, _, _)| k == key).map(|(_, p, _)| *p),
            _ => None,
        }
    }

    /// Follows a serde path (`steps[3].max_noise`) as far as it goes and returns the deepest
    /// position reached, so an error lands on the most precise line available.
    pub fn locate(&self, path: &[PathSeg]) -> Pos {
        let mut node = self;
        let mut pos = self.pos();
        for seg in path {
            match (seg, node) {
                (PathSeg::Key(k), Node::Map(entries, _)) => match entries.iter().find(|(key, _, _)| key == k) {
                    Some((_, kp, v)) => {
                        pos = if matches!(v, Node::Scalar(..)) { v.pos() } else { *kp };
                        node = v;
                    }
                    None => return pos,
                },
                (PathSeg::Index(i), Node::Seq(items, _)) => match items.get(*i) {
                    Some(v) => {
                        pos = v.pos();
                        node = v;
                    }
                    None => return pos,
                },
                _ => return pos,
            }
        }
        pos
    }

    /// Gives this node and everything under it the position `pos` (a `--set` value, parsed
    /// from its own text, would otherwise claim line 1 of the file).
    pub fn place_at(&mut self, pos: Pos) {
        match self {
            Node::Scalar(_, p) => *p = pos,
            Node::Seq(items, p) => {
                *p = pos;
                items.iter_mut().for_each(|n| n.place_at(pos));
            }
            Node::Map(entries, p) => {
                *p = pos;
                for (_, kp, v) in entries {
                    *kp = pos;
                    v.place_at(pos);
                }
            }
        }
    }

    /// Marks this node and everything under it (keys included) as read from file number `doc`
    /// ([`Pos::doc`]): a document another is set over keeps, in each position, which of the
    /// two files it came from.
    pub fn read_from(&mut self, doc: u32) {
        match self {
            Node::Scalar(_, p) => p.doc = doc,
            Node::Seq(items, p) => {
                p.doc = doc;
                items.iter_mut().for_each(|n| n.read_from(doc));
            }
            Node::Map(entries, p) => {
                p.doc = doc;
                for (_, kp, v) in entries {
                    kp.doc = doc;
                    v.read_from(doc);
                }
            }
        }
    }

    /// Sets the node at `path`, creating mapping keys on the way. Used by `--set`. A key it
    /// creates is placed where the value came from (a `--set` argument: [`Pos::of_override`]),
    /// not at its parent mapping, so a misspelt key is reported against what wrote it.
    pub fn set(&mut self, path: &[PathSeg], value: Node) -> Result<(), String> {
        let at = value.pos();
        self.set_keys_at(path, value, at)
    }

    /// As [`Node::set`], with the keys it creates (and the mappings between) placed at `at`.
    fn set_keys_at(&mut self, path: &[PathSeg], value: Node, at: Pos) -> Result<(), String> {
        let Some((first, rest)) = path.split_first() else {
            *self = value;
            return Ok(());
        };
        match (first, self) {
            (PathSeg::Key(k), Node::Map(entries, _)) => {
                if let Some((_, _, v)) = entries.iter_mut().find(|(key, _, _)| key == k) {
                    return v.set_keys_at(rest, value, at);
                }
                let mut child = Node::Map(Vec::new(), at);
                child.set_keys_at(rest, value, at)?;
                entries.push((k.clone(), at, child));
                Ok(())
            }
            (PathSeg::Index(i), Node::Seq(items, _)) => {
                let len = items.len();
                match items.get_mut(*i) {
                    Some(v) => v.set_keys_at(rest, value, at),
                    None => Err(format!("index [{i}] is out of range: the list has {len} items")),
                }
            }
            (PathSeg::Key(k), _) => Err(format!("cannot set `{k}`: the parent is not a mapping")),
            (PathSeg::Index(i), _) => Err(format!("cannot index [{i}]: the parent is not a list")),
        }
    }
}

/// One step of a path into the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSeg {
    Key(String),
    Index(usize),
}

/// Parses `steps[3].max_noise` or `sink.path` into path segments.
pub fn parse_path(s: &str) -> Result<Vec<PathSeg>, String> {
    let mut segs = Vec::new();
    for part in s.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            segs.push(PathSeg::Key(name.to_string()));
        } else if rest.is_empty() {
            return Err(format!("empty key in `{s}`"));
        }
        while !rest.is_empty() {
            let close = rest.find(']').ok_or_else(|| format!("missing `]` in `{s}`"))?;
            let idx = rest[1..close]
                .parse::<usize>()
                .map_err(|_| format!("`{}` is not a list index in `{s}`", &rest[1..close]))?;
            segs.push(PathSeg::Index(idx));
            rest = &rest[close + 1..];
            if !rest.is_empty() && !rest.starts_with('[') {
                return Err(format!("unexpected `{rest}` in `{s}`"));
            }
        }
    }
    Ok(segs)
}

/// Parses one YAML document into a positioned tree. An empty document is an empty mapping.
/// Aliases are expanded within [`MAX_ALIAS_NODES`] and [`MAX_ALIAS_BYTES`], nesting within
/// [`MAX_DEPTH`]; past a bound the error is at the alias (or bracket) that crosses it.
pub fn parse(src: &str) -> Result<Node, YamlError> {
    let mut parser = Parser::new_from_str(src);
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Node> = None;
    // Where each anchored node is, with its shape (what an alias of it makes).
    let mut anchors: std::collections::HashMap<usize, (Anchored, Shape)> = Default::default();
    // What aliases have made so far: nodes and bytes of text.
    let (mut alias_nodes, mut alias_bytes) = (0usize, 0usize);
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Ok(ev)) => ev,
            Some(Err(e)) => {
                return Err(YamlError {
                    pos: Pos::at(e.marker().line(), e.marker().col() + 1),
                    message: e.info().to_string(),
                })
            }
        };
        let pos = Pos::at(span.start.line(), span.start.col() + 1);
        let done: Option<(Node, usize, Shape)> = match event {
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                if root.is_some() {
                    return Err(YamlError { pos, message: "only one YAML document is allowed".into() });
                }
                None
            }
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => None,
            Event::Alias(id) => {
                let unknown = || YamlError { pos, message: "unknown alias".into() };
                let (anchored, shape) = anchors.get(&id).ok_or_else(unknown)?;
                // The alias as written (`*name`), for a message.
                let name = || {
                    let (from, to) = (span.start.index(), span.end.index());
                    let written: String = src.chars().skip(from).take(to.saturating_sub(from)).collect();
                    if written.starts_with('*') {
                        written
                    } else {
                        format!("*{written}")
                    }
                };
                let depth = stack.len() + shape.height;
                if depth > MAX_DEPTH {
                    return Err(YamlError {
                        pos,
                        message: format!(
                            "alias `{}` would nest lists and mappings {depth} levels deep, past the limit of {MAX_DEPTH}",
                            name()
                        ),
                    });
                }
                let nodes = alias_nodes.saturating_add(shape.nodes);
                if nodes > MAX_ALIAS_NODES {
                    return Err(YamlError {
                        pos,
                        message: format!(
                            "alias `{}` would repeat {} nodes, bringing the nodes that aliases make to {nodes}, past the limit of {MAX_ALIAS_NODES} per document",
                            name(),
                            shape.nodes
                        ),
                    });
                }
                let bytes = alias_bytes.saturating_add(shape.bytes);
                if bytes > MAX_ALIAS_BYTES {
                    return Err(YamlError {
                        pos,
                        message: format!(
                            "alias `{}` would copy {} bytes of text, bringing the text that aliases copy to {bytes} bytes, past the limit of {MAX_ALIAS_BYTES} per document",
                            name(),
                            shape.bytes
                        ),
                    });
                }
                let node = match anchored {
                    Anchored::Scalar(n) => n.clone(),
                    Anchored::At(path) => find(&stack, path).ok_or_else(unknown)?.clone(),
                };
                alias_nodes = nodes;
                alias_bytes = bytes;
                Some((node, 0, *shape))
            }
            Event::Scalar(text, style, anchor, _tag) => {
                let value = resolve_scalar(&text, style);
                let shape = Shape::scalar(&value);
                Some((Node::Scalar(value, pos), anchor, shape))
            }
            Event::SequenceStart(anchor, _) => {
                let slot = open(&stack, pos)?;
                stack.push(Frame { kind: FrameKind::Seq(Vec::new()), pos, anchor, slot, shape: Shape::collection() });
                None
            }
            Event::MappingStart(anchor, _) => {
                let slot = open(&stack, pos)?;
                stack.push(Frame {
                    kind: FrameKind::Map(Vec::new(), None),
                    pos,
                    anchor,
                    slot,
                    shape: Shape::collection(),
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame { kind: FrameKind::Seq(items), pos: p, anchor, shape, .. }) => {
                    Some((Node::Seq(items, p), anchor, shape))
                }
                _ => return Err(YamlError { pos, message: "unbalanced sequence".into() }),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame { kind: FrameKind::Map(entries, _), pos: p, anchor, shape, .. }) => {
                    Some((Node::Map(entries, p), anchor, shape))
                }
                _ => return Err(YamlError { pos, message: "unbalanced mapping".into() }),
            },
        };
        let Some((node, anchor, shape)) = done else { continue };
        if anchor != 0 {
            // A scalar is kept as it is; a list or mapping by where it lands in the tree (the
            // child it becomes of the innermost open one), not copied: nested anchors would
            // copy the same nodes once per level.
            let anchored = match &node {
                Node::Scalar(..) => Anchored::Scalar(node.clone()),
                _ => {
                    let mut path: Vec<usize> = stack.iter().skip(1).map(|f| f.slot).collect();
                    path.push(stack.last().map_or(0, Frame::len));
                    Anchored::At(path)
                }
            };
            anchors.insert(anchor, (anchored, shape));
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame { kind: FrameKind::Seq(items), shape: parent, .. }) => {
                parent.add(shape, 0);
                items.push(node);
            }
            Some(Frame { kind: FrameKind::Map(entries, pending), shape: parent, .. }) => match pending.take() {
                None => {
                    let key = match &node {
                        Node::Scalar(Value::String(s), _) => s.clone(),
                        Node::Scalar(v, _) => v.to_string(),
                        _ => return Err(YamlError { pos: node.pos(), message: "mapping keys must be scalars".into() }),
                    };
                    if entries.iter().any(|(k, _, _)| *k == key) {
                        return Err(YamlError { pos: node.pos(), message: format!("duplicate key `{key}`") });
                    }
                    *pending = Some((key, node.pos()));
                }
                Some((key, kp)) => {
                    parent.add(shape, key.len());
                    entries.push((key, kp, node));
                }
            },
        }
    }
    Ok(root.unwrap_or(Node::Map(Vec::new(), Pos::at(1, 1))))
}

/// Refuses a list or mapping opened at `pos` that would nest past [`MAX_DEPTH`]; else the
/// index it will have among the children of the one it is in.
fn open(stack: &[Frame], pos: Pos) -> Result<usize, YamlError> {
    if stack.len() >= MAX_DEPTH {
        return Err(YamlError {
            pos,
            message: format!(
                "lists and mappings nest more than {MAX_DEPTH} levels deep here (the limit is {MAX_DEPTH})"
            ),
        });
    }
    Ok(stack.last().map_or(0, Frame::len))
}

/// The anchored node at `path` (child indices from the document's node down) while the
/// document is read: down the open lists and mappings while the path follows them, then into
/// the finished child where it leaves them.
fn find<'a>(stack: &'a [Frame], path: &[usize]) -> Option<&'a Node> {
    let mut level = 0;
    while stack.get(level + 1).is_some_and(|next| path.get(level) == Some(&next.slot)) {
        level += 1;
    }
    let mut node = stack.get(level)?.child(*path.get(level)?)?;
    for &i in path.get(level + 1..)? {
        node = match node {
            Node::Seq(items, _) => items.get(i)?,
            Node::Map(entries, _) => &entries.get(i)?.2,
            Node::Scalar(..) => return None,
        };
    }
    Some(node)
}

/// What an anchor names, for its aliases.
enum Anchored {
    Scalar(Node),
    /// A list or mapping: where it is in the tree being read ([`find`]).
    At(Vec<usize>),
}

/// A list or mapping being read.
struct Frame {
    kind: FrameKind,
    pos: Pos,
    /// Its anchor's id, 0 for none.
    anchor: usize,
    /// Its index among the children of the list or mapping it is in.
    slot: usize,
    /// Itself and what it holds so far.
    shape: Shape,
}

impl Frame {
    /// How many children it has so far.
    fn len(&self) -> usize {
        match &self.kind {
            FrameKind::Seq(items) => items.len(),
            FrameKind::Map(entries, _) => entries.len(),
        }
    }

    fn child(&self, i: usize) -> Option<&Node> {
        match &self.kind {
            FrameKind::Seq(items) => items.get(i),
            FrameKind::Map(entries, _) => entries.get(i).map(|(_, _, n)| n),
        }
    }
}

enum FrameKind {
    Seq(Vec<Node>),
    /// The entries, and a key read whose value has not come yet.
    Map(Vec<(String, Pos, Node)>, Option<(String, Pos)>),
}

/// The size of a node's tree, which is what an alias of it makes: its nodes, the bytes of text
/// in its strings and keys, and its height in lists and mappings (0 for a scalar).
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    nodes: usize,
    bytes: usize,
    height: usize,
}

impl Shape {
    fn scalar(value: &Value) -> Shape {
        let bytes = match value {
            Value::String(s) => s.len(),
            _ => 0,
        };
        Shape { nodes: 1, bytes, height: 0 }
    }

    fn collection() -> Shape {
        Shape { nodes: 1, bytes: 0, height: 1 }
    }

    /// `child` added to this list or mapping, under a key of `key_bytes` bytes.
    fn add(&mut self, child: Shape, key_bytes: usize) {
        self.nodes = self.nodes.saturating_add(child.nodes);
        self.bytes = self.bytes.saturating_add(child.bytes).saturating_add(key_bytes);
        self.height = self.height.max(child.height + 1);
    }
}

/// YAML 1.2 core schema resolution for plain scalars; quoted and block scalars stay strings.
fn resolve_scalar(text: &str, style: ScalarStyle) -> Value {
    if style != ScalarStyle::Plain {
        return Value::String(text.to_string());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(i) = text.parse::<i64>() {
            return Value::Number(i.into());
        }
        if let Ok(u) = text.parse::<u64>() {
            return Value::Number(u.into());
        }
    }
    let looks_float = digits.bytes().next().is_some_and(|b| b.is_ascii_digit() || b == b'.')
        && digits.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'));
    if looks_float {
        if let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64) {
            return Value::Number(n);
        }
    }
    Value::String(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_resolve_like_yaml_core_schema() {
        let n = parse("a: 12\nb: 1.5\nc: true\nd: ~\ne: '12'\nf: hello\ng: -3\n").unwrap();
        let v = n.to_value();
        assert_eq!(v["a"], 12);
        assert_eq!(v["b"], 1.5);
        assert_eq!(v["c"], true);
        assert!(v["d"].is_null());
        assert_eq!(v["e"], "12");
        assert_eq!(v["f"], "hello");
        assert_eq!(v["g"], -3);
    }

    #[test]
    fn positions_are_one_based_and_point_at_keys() {
        let n = parse("name: x\nsteps:\n  - type: filter\n    max_nosie: 3\n").unwrap();
        let step = &n.get("steps").map(|s| match s {
            Node::Seq(items, _) => items[0].clone(),
            _ => unreachable!(),
        });
        let step = step.as_ref().unwrap();
        assert_eq!(step.key_pos("max_nosie"), Some(Pos::at(4, 5)));
        let path = parse_path("steps[0].max_nosie").unwrap();
        assert_eq!(n.locate(&path), Pos::at(4, 16));
    }

    #[test]
    fn set_overrides_and_creates_keys() {
        let mut n = parse("steps:\n  - type: filter\n    max_noise: 15\n").unwrap();
        n.set(&parse_path("steps[0].max_noise").unwrap(), parse("12").unwrap()).unwrap();
        n.set(&parse_path("sink.path").unwrap(), parse("out/x").unwrap()).unwrap();
        let v = n.to_value();
        assert_eq!(v["steps"][0]["max_noise"], 12);
        assert_eq!(v["sink"]["path"], "out/x");
        assert!(n.set(&parse_path("steps[5].x").unwrap(), parse("1").unwrap()).is_err());
    }

    #[test]
    fn syntax_errors_carry_a_position() {
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.pos.line >= 1, "{e:?}");
        assert!(parse("a: 1\na: 2\n").unwrap_err().message.contains("duplicate key"));
    }

    #[test]
    fn a_document_set_over_another_keeps_which_file_each_position_is_of() {
        let mut base = parse("lr: 1\nmodel:\n  preset: tiny\n").unwrap();
        base.read_from(1);
        let over = parse("x: 0\nlr: 2\n").unwrap();
        base.set(&parse_path("lr").unwrap(), over.get("lr").unwrap().clone()).unwrap();
        assert_eq!(base.locate(&parse_path("lr").unwrap()), Pos::at(2, 5));
        assert_eq!(base.locate(&parse_path("model.preset").unwrap()), Pos { line: 3, col: 11, doc: 1 });
        assert_eq!(base.key_pos("model"), Some(Pos { line: 2, col: 1, doc: 1 }));
    }

    #[test]
    fn keys_a_set_adds_are_placed_where_the_value_came_from() {
        let mut n = parse("sink:\n  path: out\n").unwrap();
        let at = Pos::of_override(2);
        n.set(&parse_path("sink.pathh").unwrap(), Node::Scalar(Value::String("x".into()), at)).unwrap();
        assert_eq!(n.get("sink").unwrap().key_pos("pathh"), Some(at));
        assert_eq!(n.get("sink").unwrap().key_pos("path"), Some(Pos::at(2, 3)));
        n.set(&parse_path("extra.deep").unwrap(), Node::Scalar(Value::Null, at)).unwrap();
        assert_eq!(n.key_pos("extra"), Some(at));
        assert_eq!(n.get("extra").unwrap().key_pos("deep"), Some(at));
    }

    /// `levels` levels of nine aliases, each of the level before: 9^levels scalars expanded.
    fn alias_bomb(levels: usize) -> String {
        let names: Vec<char> = ('a'..='z').take(levels).collect();
        let mut s = format!("a: &a [{}]\n", ["x"; 9].join(", "));
        for w in names.windows(2) {
            let refs = (0..9).map(|_| format!("*{}", w[0])).collect::<Vec<_>>().join(", ");
            s.push_str(&format!("{n}: &{n} [{refs}]\n", n = w[1]));
        }
        s
    }

    #[test]
    fn aliases_within_the_bounds_expand() {
        // Five levels: aliases make 74718 nodes, under the bound.
        let v = parse(&alias_bomb(5)).unwrap().to_value();
        assert_eq!(v["e"][8][8][8][8][8], "x");
        assert_eq!(v["e"].as_array().map(Vec::len), Some(9));
        let v = parse("base: &b {x: 1, y: [2]}\nother: *b\n").unwrap().to_value();
        assert_eq!(v["other"], v["base"]);
        // An anchor inside a list still open, aliased there and after; an anchored key.
        let v = parse("x: &o [&i [1, {k: v}], *i]\ny: *o\n&n z: *i\nw: *n\n").unwrap().to_value();
        assert_eq!(v["x"][1], v["x"][0]);
        assert_eq!(v["x"][0][1]["k"], "v");
        assert_eq!(v["y"], v["x"]);
        assert_eq!(v["z"], v["x"][0]);
        assert_eq!(v["w"], "z");
    }

    #[test]
    fn an_alias_bomb_is_refused_at_the_alias_that_crosses_the_bound() {
        // 74718 nodes made by line 5; `*e` repeats e's 66430.
        let e = parse(&(alias_bomb(5) + "f: [*e]\n")).unwrap_err();
        assert_eq!(e.pos, Pos::at(6, 5), "{e:?}");
        assert_eq!(
            e.message,
            format!(
                "alias `*e` would repeat 66430 nodes, bringing the nodes that aliases make to 141148, past the limit of {MAX_ALIAS_NODES} per document"
            )
        );
    }

    #[test]
    fn aliases_of_long_text_are_bounded_by_the_bytes_they_copy() {
        let text = format!("s: &s \"{}\"\nl: [{}]\n", "x".repeat(2000), ["*s"; 6000].join(","));
        let e = parse(&text).unwrap_err();
        // The 5001st alias takes the copies past 10 MB (5001 × 2000 bytes).
        assert_eq!(e.pos, Pos::at(2, 5 + 3 * 5000), "{e:?}");
        assert!(e.message.starts_with("alias `*s` would copy 2000 bytes of text"), "{e:?}");
        assert!(e.message.contains(&format!("past the limit of {MAX_ALIAS_BYTES}")), "{e:?}");
    }

    #[test]
    fn nesting_is_bounded() {
        // The document's mapping is level 1: 127 brackets reach the limit, the 128th passes it.
        let nested = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert!(parse(&nested(MAX_DEPTH - 1)).is_ok());
        let e = parse(&nested(MAX_DEPTH)).unwrap_err();
        assert_eq!(e.pos, Pos::at(1, 3 + MAX_DEPTH), "{e:?}");
        assert!(e.message.contains(&format!("more than {MAX_DEPTH} levels")), "{e:?}");
        // An alias nests its anchor's levels where it stands: 41 + 100.
        let text = format!("a: &a {}{}\nb: {}*a{}\n", "[".repeat(100), "]".repeat(100), "[".repeat(40), "]".repeat(40));
        let e = parse(&text).unwrap_err();
        assert_eq!(e.pos, Pos::at(2, 44), "{e:?}");
        assert!(e.message.starts_with("alias `*a` would nest lists and mappings 141 levels deep"), "{e:?}");
    }

    #[test]
    fn bad_paths_are_rejected() {
        assert!(parse_path("steps[x].a").is_err());
        assert!(parse_path("steps[1").is_err());
        assert_eq!(
            parse_path("steps[3].max_noise").unwrap(),
            vec![PathSeg::Key("steps".into()), PathSeg::Index(3), PathSeg::Key("max_noise".into())]
        );
    }
}
