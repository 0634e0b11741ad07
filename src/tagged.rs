//! `tagged_enum!`: a `#[serde(tag = "type")]` enum over component structs, plus the table that
//! lets configuration loading deserialise each variant on its own and keep error paths.

macro_rules! tagged_enum {
    ($(#[$meta:meta])* $vis:vis enum $enum:ident { $($name:literal => $variant:ident($ty:ty)),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
        #[serde(tag = "type")]
        $vis enum $enum {
            $(#[serde(rename = $name)] $variant($ty),)*
        }

        impl $enum {
            /// Every valid `type:` value.
            pub const TYPES: &'static [&'static str] = &[$($name),*];

            /// The `type:` name of this component.
            pub fn type_name(&self) -> &'static str {
                match self { $($enum::$variant(_) => $name,)* }
            }

            /// Deserialises the options of a component whose `type` is known, keeping the path
            /// of any error so it can be traced back to a YAML line. `None`: unknown type.
            pub fn from_type_and_value(
                type_name: &str,
                options: serde_json::Value,
            ) -> Option<Result<Self, serde_path_to_error::Error<serde_json::Error>>> {
                match type_name {
                    $($name => Some(serde_path_to_error::deserialize(options).map($enum::$variant)),)*
                    _ => None,
                }
            }
        }
    };
}
