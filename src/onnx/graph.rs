//! A small builder for ONNX graphs: nodes with named outputs, constant initializers, typed
//! attributes. The BERT graph in [`super::export`] is written with it, block by block.

use super::proto::{attribute_type, data_type, AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto};

/// The domain of ONNX Runtime's contrib ops (`Attention`, `SkipLayerNormalization`, …).
pub const MS_DOMAIN: &str = "com.microsoft";

#[derive(Default)]
pub struct Graph {
    nodes: Vec<NodeProto>,
    pub initializers: Vec<TensorProto>,
    pub inputs: Vec<ValueInfoProto>,
    pub outputs: Vec<ValueInfoProto>,
    names: std::collections::HashSet<String>,
    /// Whether a `com.microsoft` op was used (the model then imports that domain).
    pub uses_ms_domain: bool,
    /// fp16 parameters beyond ±65504: clamp them (else refuse), and the ones clamped.
    pub fp16_clamp: bool,
    pub clamped: Vec<String>,
}

/// An attribute value.
pub enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Str(&'static str),
}

impl Graph {
    /// A fresh, unique tensor name from `hint` (`/layer.0/attention/Softmax`, …).
    fn unique(&mut self, hint: &str) -> String {
        let mut name = hint.to_string();
        let mut i = 1;
        while !self.names.insert(name.clone()) {
            name = format!("{hint}_{i}");
            i += 1;
        }
        name
    }

    /// Adds a node of the default domain with one output; returns the output's name.
    pub fn op(&mut self, op: &str, name: &str, inputs: &[&str], attrs: Vec<(&str, Attr)>) -> String {
        self.op_in("", op, name, inputs, attrs, 1).remove(0)
    }

    /// Adds a `com.microsoft` node with `outputs` outputs.
    pub fn ms_op(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[&str],
        attrs: Vec<(&str, Attr)>,
        outputs: usize,
    ) -> Vec<String> {
        self.uses_ms_domain = true;
        self.op_in(MS_DOMAIN, op, name, inputs, attrs, outputs)
    }

    /// Adds a node of `domain` (`""`: the default one) with `outputs` outputs.
    pub fn op_in(
        &mut self,
        domain: &str,
        op: &str,
        name: &str,
        inputs: &[&str],
        attrs: Vec<(&str, Attr)>,
        outputs: usize,
    ) -> Vec<String> {
        let node_name = self.unique(name);
        let outs: Vec<String> = (0..outputs)
            .map(|i| if i == 0 { format!("{node_name}_output") } else { format!("{node_name}_output_{i}") })
            .collect();
        let attribute = attrs.into_iter().map(|(n, a)| attribute(n, a)).collect();
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outs.clone(),
            name: node_name,
            op_type: op.to_string(),
            attribute,
            domain: domain.to_string(),
        });
        outs
    }

    /// A float32 initializer (weights are stored as `raw_data`, little-endian).
    pub fn f32_init(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        debug_assert_eq!(dims.iter().product::<usize>(), values.len());
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.init(name, dims, data_type::FLOAT, raw)
    }

    /// An int64 initializer (shapes, axes, indices).
    pub fn i64_init(&mut self, name: &str, dims: &[usize], values: &[i64]) -> String {
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.init(name, dims, data_type::INT64, raw)
    }

    /// A float16 initializer (values rounded to nearest, ties to even).
    pub fn f16_init(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        debug_assert_eq!(dims.iter().product::<usize>(), values.len());
        let raw = values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        self.init(name, dims, data_type::FLOAT16, raw)
    }

    /// An int8 initializer (quantised weights, their zero points).
    pub fn i8_init(&mut self, name: &str, dims: &[usize], values: &[i8]) -> String {
        debug_assert_eq!(dims.iter().product::<usize>(), values.len());
        let raw = values.iter().map(|&v| v as u8).collect();
        self.init(name, dims, data_type::INT8, raw)
    }

    /// A float32 scalar constant.
    pub fn scalar(&mut self, name: &str, value: f32) -> String {
        self.f32_init(name, &[], &[value])
    }

    fn init(&mut self, name: &str, dims: &[usize], data_type: i32, raw_data: Vec<u8>) -> String {
        let name = self.unique(name);
        self.initializers.push(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type,
            name: name.clone(),
            raw_data,
            ..Default::default()
        });
        name
    }

    pub fn finish(self, name: &str, doc: &str) -> GraphProto {
        GraphProto {
            node: self.nodes,
            name: name.to_string(),
            initializer: self.initializers,
            doc_string: doc.to_string(),
            input: self.inputs,
            output: self.outputs,
        }
    }

    /// Renames a node output (e.g. the last one to the graph output's name).
    pub fn rename_output(&mut self, from: &str, to: &str) {
        for n in &mut self.nodes {
            for o in &mut n.output {
                if o == from {
                    *o = to.to_string();
                }
            }
        }
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
}

fn attribute(name: &str, a: Attr) -> AttributeProto {
    let mut p = AttributeProto { name: name.to_string(), ..Default::default() };
    match a {
        Attr::Int(i) => {
            p.r#type = attribute_type::INT;
            p.i = i;
        }
        Attr::Float(f) => {
            p.r#type = attribute_type::FLOAT;
            p.f = f;
        }
        Attr::Ints(v) => {
            p.r#type = attribute_type::INTS;
            p.ints = v;
        }
        Attr::Str(s) => {
            p.r#type = attribute_type::STRING;
            p.s = s.as_bytes().to_vec();
        }
    }
    p
}

/// Initializers whose data goes to a file beside the model (past protobuf's 2 GB limit):
/// each tensor's bytes are appended to `data` and replaced by a reference
/// (`location`, `offset`, `length`). Offsets are aligned to 64 bytes for mmap.
pub fn externalize(initializers: &mut [TensorProto], location: &str, data: &mut Vec<u8>) {
    use super::proto::{StringStringEntryProto as Kv, DATA_LOCATION_EXTERNAL};
    for t in initializers.iter_mut() {
        if t.raw_data.len() < 1024 {
            continue;
        }
        while data.len() % 64 != 0 {
            data.push(0);
        }
        let offset = data.len();
        let raw = std::mem::take(&mut t.raw_data);
        data.extend_from_slice(&raw);
        t.data_location = DATA_LOCATION_EXTERNAL;
        let kv = |k: &str, v: String| Kv { key: k.to_string(), value: v };
        t.external_data = vec![
            kv("location", location.to_string()),
            kv("offset", offset.to_string()),
            kv("length", raw.len().to_string()),
        ];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_external_data_is_aligned_and_complete() {
        let mut g = Graph::default();
        let a = g.f32_init("w", &[300], &vec![1.0; 300]);
        let b = g.f32_init("w", &[2], &[2.0, 3.0]);
        let c = g.f32_init("w", &[500], &vec![4.0; 500]);
        assert_eq!((a.as_str(), b.as_str(), c.as_str()), ("w", "w_1", "w_2"));
        let x = g.op("Add", "/add", &[&a, &a], vec![]);
        let y = g.op("Add", "/add", &[&x, &x], vec![]);
        assert_ne!(x, y);
        let mut data = Vec::new();
        externalize(&mut g.initializers, "m.onnx.data", &mut data);
        let small = &g.initializers[1];
        assert_eq!(small.raw_data.len(), 8, "small tensors stay inline");
        for t in [&g.initializers[0], &g.initializers[2]] {
            assert!(t.raw_data.is_empty());
            let get = |k: &str| t.external_data.iter().find(|e| e.key == k).unwrap().value.clone();
            let (offset, length): (usize, usize) = (get("offset").parse().unwrap(), get("length").parse().unwrap());
            assert_eq!(offset % 64, 0);
            assert_eq!(get("location"), "m.onnx.data");
            let first = f32::from_le_bytes(data[offset..offset + 4].try_into().unwrap());
            assert_eq!((length, first), (t.dims[0] as usize * 4, if t.name == "w" { 1.0 } else { 4.0 }));
        }
    }
}
