//! A YAML tree that remembers where every node came from, so configuration errors can name
//! `file:line:column`. Parsed with `saphyr-parser` events; scalars resolve like YAML 1.2's core
//! schema, then the tree converts to `serde_json::Value` for typed deserialisation.

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Number, Value};

/// 1-based line and column of a node in its source. A node a `--set` wrote has no line of a
/// file: line 0, and the override's index + 1 as its column ([`Pos::of_override`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    /// Where the `index`-th `--set` of a command line put a value.
    pub fn of_override(index: usize) -> Pos {
        Pos { line: 0, col: index + 1 }
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

    /// Sets the node at `path`, creating mapping keys on the way. Used by `--set`.
    pub fn set(&mut self, path: &[PathSeg], value: Node) -> Result<(), String> {
        let Some((first, rest)) = path.split_first() else {
            *self = value;
            return Ok(());
        };
        match (first, self) {
            (PathSeg::Key(k), Node::Map(entries, p)) => {
                if let Some((_, _, v)) = entries.iter_mut().find(|(key, _, _)| key == k) {
                    return v.set(rest, value);
                }
                let mut child = Node::Map(Vec::new(), *p);
                child.set(rest, value)?;
                entries.push((k.clone(), *p, child));
                Ok(())
            }
            (PathSeg::Index(i), Node::Seq(items, _)) => {
                let len = items.len();
                match items.get_mut(*i) {
                    Some(v) => v.set(rest, value),
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
pub fn parse(src: &str) -> Result<Node, YamlError> {
    let mut parser = Parser::new_from_str(src);
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Node> = None;
    let mut anchors: std::collections::HashMap<usize, Node> = Default::default();
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Ok(ev)) => ev,
            Some(Err(e)) => {
                return Err(YamlError {
                    pos: Pos { line: e.marker().line(), col: e.marker().col() + 1 },
                    message: e.info().to_string(),
                })
            }
        };
        let pos = Pos { line: span.start.line(), col: span.start.col() + 1 };
        let done: Option<(Node, usize)> = match event {
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                if root.is_some() {
                    return Err(YamlError { pos, message: "only one YAML document is allowed".into() });
                }
                None
            }
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => None,
            Event::Alias(id) => match anchors.get(&id) {
                Some(n) => Some((n.clone(), 0)),
                None => return Err(YamlError { pos, message: "unknown alias".into() }),
            },
            Event::Scalar(text, style, anchor, _tag) => Some((Node::Scalar(resolve_scalar(&text, style), pos), anchor)),
            Event::SequenceStart(anchor, _) => {
                stack.push(Frame::Seq(Vec::new(), pos, anchor));
                None
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Frame::Map(Vec::new(), None, pos, anchor));
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(items, p, anchor)) => Some((Node::Seq(items, p), anchor)),
                _ => return Err(YamlError { pos, message: "unbalanced sequence".into() }),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(entries, _, p, anchor)) => Some((Node::Map(entries, p), anchor)),
                _ => return Err(YamlError { pos, message: "unbalanced mapping".into() }),
            },
        };
        let Some((node, anchor)) = done else { continue };
        if anchor != 0 {
            anchors.insert(anchor, node.clone());
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::Seq(items, _, _)) => items.push(node),
            Some(Frame::Map(entries, pending, _, _)) => match pending.take() {
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
                Some((key, kp)) => entries.push((key, kp, node)),
            },
        }
    }
    Ok(root.unwrap_or(Node::Map(Vec::new(), Pos { line: 1, col: 1 })))
}

enum Frame {
    Seq(Vec<Node>, Pos, usize),
    Map(Vec<(String, Pos, Node)>, Option<(String, Pos)>, Pos, usize),
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
        assert_eq!(step.key_pos("max_nosie"), Some(Pos { line: 4, col: 5 }));
        let path = parse_path("steps[0].max_nosie").unwrap();
        assert_eq!(n.locate(&path), Pos { line: 4, col: 16 });
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
    fn bad_paths_are_rejected() {
        assert!(parse_path("steps[x].a").is_err());
        assert!(parse_path("steps[1").is_err());
        assert_eq!(
            parse_path("steps[3].max_noise").unwrap(),
            vec![PathSeg::Key("steps".into()), PathSeg::Index(3), PathSeg::Key("max_noise".into())]
        );
    }
}
