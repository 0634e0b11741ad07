//! The few ONNX protobuf messages an exported BERT needs, written by hand with `prost` so the
//! build needs no `protoc`. Field numbers and names follow `onnx/onnx.proto3` (ONNX 1.17);
//! fields we never write are left out (protobuf readers skip what they do not know, and we
//! only read back what we wrote).

#![allow(clippy::derive_partial_eq_without_eq)]

/// ONNX IR version 8 goes with opset 17.
pub const IR_VERSION: i64 = 8;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, tag = "2")]
    pub producer_name: String,
    #[prost(string, tag = "3")]
    pub producer_version: String,
    #[prost(string, tag = "4")]
    pub domain: String,
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(string, tag = "10")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    #[prost(string, tag = "7")]
    pub domain: String,
}

/// `AttributeProto.AttributeType`.
pub mod attribute_type {
    pub const FLOAT: i32 = 1;
    pub const INT: i32 = 2;
    pub const STRING: i32 = 3;
    pub const TENSOR: i32 = 4;
    pub const INTS: i32 = 7;
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "20")]
    pub r#type: i32,
    #[prost(float, tag = "2")]
    pub f: f32,
    #[prost(int64, tag = "3")]
    pub i: i64,
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
}

/// `TensorProto.DataType`.
pub mod data_type {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const FLOAT16: i32 = 10;
}

/// `TensorProto.DataLocation.EXTERNAL`.
pub const DATA_LOCATION_EXTERNAL: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(string, tag = "8")]
    pub name: String,
    /// Little-endian values, row-major.
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// `location`, `offset`, `length` when the values live in a file beside the model.
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    #[prost(int32, tag = "14")]
    pub data_location: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// The `tensor_type` member of the `value` oneof (the only one we use).
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoTensor {
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// A dimension: a fixed size or a named, dynamic one (the `value` oneof).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
}

impl ValueInfoProto {
    /// A tensor input or output; a dimension is fixed (`Ok(n)`) or named (`Err("batch")`).
    pub fn tensor(name: &str, elem_type: i32, dims: &[Result<i64, &str>]) -> ValueInfoProto {
        let dim = dims
            .iter()
            .map(|d| match d {
                Ok(n) => Dimension { dim_value: Some(*n), dim_param: None },
                Err(p) => Dimension { dim_value: None, dim_param: Some(p.to_string()) },
            })
            .collect();
        ValueInfoProto {
            name: name.to_string(),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor { elem_type, shape: Some(TensorShapeProto { dim }) }),
            }),
        }
    }
}

/// The files an ONNX model is made of: the model itself and every external-data file its
/// initializers name (`model.onnx.data` …), by the `location` each gives relative to the model's
/// folder — what ONNX Runtime opens when it loads the model, and so what a key of the model must
/// cover. A location that leaves the folder is refused, as ONNX Runtime refuses it.
pub fn model_files(model: &std::path::Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::Context;
    use prost::Message;
    let bytes = std::fs::read(model).with_context(|| format!("could not read '{}'", model.display()))?;
    let proto = ModelProto::decode(bytes.as_slice())
        .with_context(|| format!("'{}' is not an ONNX model (protobuf)", model.display()))?;
    let dir = model.parent().unwrap_or(std::path::Path::new(""));
    let mut files = vec![model.to_path_buf()];
    for t in proto.graph.iter().flat_map(|g| &g.initializer) {
        if t.data_location != DATA_LOCATION_EXTERNAL {
            continue;
        }
        let Some(location) = t.external_data.iter().find(|e| e.key == "location") else { continue };
        let rel = std::path::Path::new(&location.value);
        if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            anyhow::bail!(
                "'{}': initializer `{}` keeps its data at '{}', outside the model's folder",
                model.display(),
                t.name,
                location.value
            );
        }
        let path = dir.join(rel);
        if !files.contains(&path) {
            files.push(path);
        }
    }
    Ok(files)
}
