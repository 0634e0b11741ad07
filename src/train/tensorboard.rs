//! `report_to: tensorboard`: the scalars of `metrics.jsonl` as TensorBoard event files, which
//! TensorBoard (and `tensorboard.backend.event_processing`) read unchanged.
//!
//! An event file is a sequence of TFRecords — `u64` length, masked CRC-32C of the length,
//! the bytes, masked CRC-32C of the bytes — each an `Event` protocol buffer: first one naming
//! the file version, then one per logged record holding its scalars as `Summary.Value`s with
//! `simple_value`. Tags follow HF Trainer's: `train/loss`, `train/learning_rate`,
//! `eval/accuracy`, … The protocol buffers are encoded here by hand (three messages, five
//! fields); nothing else of TensorFlow is needed.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

/// The folder under `output_dir` that holds the event files.
pub const RUNS: &str = "runs";

/// An open event file.
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// A new event file in `output_dir/runs/`, replacing the ones there: a resumed run writes
    /// the records kept so far (`history`) again, so TensorBoard shows exactly `metrics.jsonl`.
    pub fn create(output_dir: &Path, history: &[Value]) -> Result<EventWriter> {
        let dir = output_dir.join(RUNS);
        std::fs::create_dir_all(&dir).with_context(|| format!("could not create '{}'", dir.display()))?;
        for e in std::fs::read_dir(&dir)?.flatten() {
            if e.file_name().to_string_lossy().starts_with("events.out.tfevents.") {
                std::fs::remove_file(e.path())?;
            }
        }
        let now = wall_time();
        let path = dir.join(format!("events.out.tfevents.{}.bertpipe", now as u64));
        let file = File::create(&path).with_context(|| format!("could not create '{}'", path.display()))?;
        let mut w = EventWriter { path, out: BufWriter::new(file) };
        let mut event = Vec::new();
        put_double(&mut event, 1, now);
        put_bytes(&mut event, 3, b"brain.Event:2");
        w.record(&event)?;
        for r in history {
            w.write(r)?;
        }
        Ok(w)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One `metrics.jsonl` record: its numeric fields as scalars at its `step`.
    pub fn write(&mut self, record: &Value) -> Result<()> {
        let Some(obj) = record.as_object() else { return Ok(()) };
        let step = obj.get("step").and_then(Value::as_u64).unwrap_or(0);
        let mut summary = Vec::new();
        for (key, v) in obj {
            let Some(x) = v.as_f64() else { continue };
            if key == "step" || (key == "epoch" && obj.keys().any(|k| k.starts_with("eval_"))) {
                continue;
            }
            let tag = match key.strip_prefix("eval_") {
                Some(name) => format!("eval/{name}"),
                None => format!("train/{key}"),
            };
            let mut value = Vec::new();
            put_bytes(&mut value, 1, tag.as_bytes());
            put_float(&mut value, 2, x as f32);
            put_bytes(&mut summary, 1, &value);
        }
        let mut event = Vec::new();
        put_double(&mut event, 1, wall_time());
        put_varint_field(&mut event, 2, step);
        put_bytes(&mut event, 5, &summary);
        self.record(&event)?;
        self.out.flush()?;
        Ok(())
    }

    fn record(&mut self, data: &[u8]) -> Result<()> {
        let len = (data.len() as u64).to_le_bytes();
        self.out.write_all(&len)?;
        self.out.write_all(&masked_crc(&len).to_le_bytes())?;
        self.out.write_all(data)?;
        self.out.write_all(&masked_crc(data).to_le_bytes())?;
        Ok(())
    }
}

fn wall_time() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn put_varint_field(out: &mut Vec<u8>, field: u64, x: u64) {
    put_varint(out, field << 3);
    put_varint(out, x);
}

fn put_double(out: &mut Vec<u8>, field: u64, x: f64) {
    put_varint(out, (field << 3) | 1);
    out.extend_from_slice(&x.to_le_bytes());
}

fn put_float(out: &mut Vec<u8>, field: u64, x: f32) {
    put_varint(out, (field << 3) | 5);
    out.extend_from_slice(&x.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// CRC-32C (Castagnoli), as TFRecord uses it.
fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        std::array::from_fn(|i| {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 == 1 { 0x82F6_3B78 ^ (c >> 1) } else { c >> 1 };
            }
            c
        })
    });
    !data.iter().fold(!0u32, |c, &b| table[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8))
}

fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c(data);
    (c.rotate_right(15)).wrapping_add(0xA282_EAD8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    /// The records frame and checksum as TFRecord readers expect, and hold the tags and steps.
    #[test]
    fn event_files_are_framed_tfrecords_with_the_logged_scalars() {
        let dir = tempfile::tempdir().unwrap();
        let history = [serde_json::json!({"step": 5, "epoch": 0.5, "loss": 0.25, "learning_rate": 1e-3})];
        let mut w = EventWriter::create(dir.path(), &history).unwrap();
        w.write(&serde_json::json!({"step": 10, "epoch": 1.0, "eval_accuracy": 0.75, "eval_confusion": [[1]]}))
            .unwrap();
        let bytes = std::fs::read(w.path()).unwrap();
        let mut records = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            assert_eq!(u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()), masked_crc(&bytes[at..at + 8]));
            let data = &bytes[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc(data));
            records.push(data.to_vec());
            at += 16 + len;
        }
        assert_eq!(records.len(), 3);
        let has = |r: &[u8], s: &[u8]| r.windows(s.len()).any(|w| w == s);
        assert!(has(&records[0], b"brain.Event:2"));
        assert!(has(&records[1], b"train/loss") && has(&records[1], b"train/epoch"));
        assert!(has(&records[1], &[0x10, 5]), "step 5");
        assert!(has(&records[2], b"eval/accuracy") && !has(&records[2], b"confusion"));
        assert!(has(&records[2], &0.75f32.to_le_bytes()));
        // A second writer (a resumed run) replaces the file rather than adding a second one.
        drop(w);
        EventWriter::create(dir.path(), &history).unwrap();
        assert_eq!(std::fs::read_dir(dir.path().join(RUNS)).unwrap().count(), 1);
    }
}
