//! `config.json` as Hugging Face writes it for BERT (`BertConfig`), plus the size presets of
//! Google's BERT miniatures (Turc et al. 2019): heads = hidden / 64.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The fields of HF's `BertConfig` that shape the model. Unknown fields of a checkpoint's
/// config are kept in `extra` and written back unchanged.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: Activation,
    #[serde(default = "default_dropout")]
    pub hidden_dropout_prob: f64,
    #[serde(default = "default_dropout")]
    pub attention_probs_dropout_prob: f64,
    #[serde(default = "default_positions")]
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_init_range")]
    pub initializer_range: f64,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// HF writes `null` in some configs; the padding row is 0 then.
    #[serde(default)]
    pub pad_token_id: Option<usize>,
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
    /// Dropout before the classifier; `None`: `hidden_dropout_prob`.
    #[serde(default)]
    pub classifier_dropout: Option<f64>,
    /// Class index → name, as strings keyed by the index (HF's JSON form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label2id: Option<BTreeMap<String, usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architectures: Option<Vec<String>>,
    #[serde(default = "default_model_type")]
    pub model_type: String,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The model families bertpipe builds, by `config.json`'s `model_type`. RoBERTa (`roberta`, and
/// the same network as `xlm-roberta` and `camembert`) is BERT's module tree under `roberta.`
/// with its own heads (no pooler, no NSP), position ids counted from `pad_token_id + 1` over the
/// non-padding tokens, and one token type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Bert,
    Roberta,
}

impl Family {
    /// The encoder's tensor-name prefix (`bert.encoder.layer.0…`, `roberta.encoder.layer.0…`).
    pub fn prefix(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Roberta => "roberta",
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// Exact GELU, x·Φ(x) with erf (BERT's).
    Gelu,
    /// The tanh approximation.
    #[serde(alias = "gelu_pytorch_tanh", alias = "gelu_fast")]
    GeluNew,
    Relu,
}

fn default_act() -> Activation {
    Activation::Gelu
}
fn default_dropout() -> f64 {
    0.1
}
fn default_positions() -> usize {
    512
}
fn default_type_vocab() -> usize {
    2
}
fn default_init_range() -> f64 {
    0.02
}
fn default_eps() -> f64 {
    1e-12
}
fn default_position_type() -> String {
    "absolute".into()
}
fn default_model_type() -> String {
    "bert".into()
}

/// Named sizes: layers, hidden size.
pub const PRESETS: &[(&str, usize, usize)] = &[
    ("tiny", 2, 128),
    ("mini", 4, 256),
    ("small", 4, 512),
    ("medium", 8, 512),
    ("base", 12, 768),
    ("large", 24, 1024),
];

impl BertConfig {
    /// A preset architecture (`tiny`, `mini`, `small`, `medium`, `base`, `large`).
    pub fn preset(name: &str, vocab_size: usize) -> Result<BertConfig> {
        let Some(&(_, layers, hidden)) = PRESETS.iter().find(|(n, _, _)| *n == name) else {
            let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
            bail!("unknown model preset `{name}` (valid: {})", names.join(", "));
        };
        Ok(BertConfig::new(vocab_size, layers, hidden, hidden / 64, hidden * 4))
    }

    pub fn new(vocab_size: usize, layers: usize, hidden: usize, heads: usize, intermediate: usize) -> BertConfig {
        BertConfig {
            vocab_size,
            hidden_size: hidden,
            num_hidden_layers: layers,
            num_attention_heads: heads.max(1),
            intermediate_size: intermediate,
            hidden_act: default_act(),
            hidden_dropout_prob: default_dropout(),
            attention_probs_dropout_prob: default_dropout(),
            max_position_embeddings: default_positions(),
            type_vocab_size: default_type_vocab(),
            initializer_range: default_init_range(),
            layer_norm_eps: default_eps(),
            pad_token_id: Some(0),
            position_embedding_type: default_position_type(),
            classifier_dropout: None,
            id2label: None,
            label2id: None,
            architectures: None,
            model_type: default_model_type(),
            extra: Default::default(),
        }
    }

    pub fn read(path: &Path) -> Result<BertConfig> {
        let text = std::fs::read_to_string(path).with_context(|| format!("could not read '{}'", path.display()))?;
        // The failing field is named (`vocab_size: invalid value …`), not just a column.
        let c: BertConfig = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text))
            .map_err(|e| {
                let field = e.path().to_string();
                let at = if field == "." { String::new() } else { format!("`{field}`: ") };
                anyhow::anyhow!("{at}{}", e.into_inner())
            })
            .with_context(|| format!("'{}' is not a BERT config.json", path.display()))?;
        c.check().with_context(|| format!("in '{}'", path.display()))?;
        Ok(c)
    }

    /// The longest sequence the position embeddings cover: all of them for BERT; RoBERTa's
    /// count from `pad_token_id + 1`, so two fewer (514 → 512).
    pub fn max_sequence(&self) -> usize {
        match self.family() {
            Family::Bert => self.max_position_embeddings,
            Family::Roberta => self.max_position_embeddings.saturating_sub(self.pad_token_id.unwrap_or(1) + 1),
        }
    }

    /// The family `model_type` names (checked by [`Self::check`]; BERT for anything else).
    pub fn family(&self) -> Family {
        match self.model_type.as_str() {
            "roberta" | "xlm-roberta" | "camembert" => Family::Roberta,
            _ => Family::Bert,
        }
    }

    /// The start of HF's class names for this `model_type` (`BertForMaskedLM`,
    /// `XLMRobertaForSequenceClassification`).
    pub fn class_prefix(&self) -> &'static str {
        match self.model_type.as_str() {
            "roberta" => "Roberta",
            "xlm-roberta" => "XLMRoberta",
            "camembert" => "Camembert",
            _ => "Bert",
        }
    }

    pub fn check(&self) -> Result<()> {
        match self.model_type.as_str() {
            "bert" | "roberta" | "xlm-roberta" | "camembert" => {}
            "modernbert" => bail!(
                "model_type `modernbert` is not supported yet (bertpipe builds `bert`, and `roberta`, `xlm-roberta`, `camembert`)"
            ),
            other => bail!(
                "model_type `{other}` is not supported; bertpipe builds `bert`, and `roberta`, `xlm-roberta`, `camembert` models"
            ),
        }
        if self.family() == Family::Roberta {
            let pad = self.pad_token_id.unwrap_or(1);
            if pad + 2 > self.max_position_embeddings {
                bail!(
                    "RoBERTa counts positions from pad_token_id + 1 = {}, past max_position_embeddings {}",
                    pad + 1,
                    self.max_position_embeddings
                );
            }
        }
        if self.position_embedding_type != "absolute" {
            bail!("position_embedding_type `{}` is not supported (only `absolute`)", self.position_embedding_type);
        }
        // Sizes are bounded before anything is allocated by them: a crafted config.json
        // (10⁹ positions, a 0-wide layer) is an error naming the field, never an abort.
        let sizes = [
            ("vocab_size", self.vocab_size, crate::tokenize::wordpiece::MAX_VOCAB_IDS),
            ("hidden_size", self.hidden_size, 1 << 16),
            ("num_hidden_layers", self.num_hidden_layers, 1024),
            ("num_attention_heads", self.num_attention_heads, 1024),
            ("intermediate_size", self.intermediate_size, 1 << 18),
            ("max_position_embeddings", self.max_position_embeddings, 1 << 17),
            ("type_vocab_size", self.type_vocab_size, 1 << 10),
        ];
        for (field, value, most) in sizes {
            if value == 0 || value > most {
                bail!("`{field}` is {value}; it must be between 1 and {most}");
            }
        }
        let h = self.hidden_size as u128;
        let params = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) as u128 * h
            + self.num_hidden_layers as u128 * (4 * h * h + 2 * h * self.intermediate_size as u128);
        if params > 1 << 34 {
            bail!("these sizes make {params} parameters (over 2^34 = 64 GiB of f32): a damaged config.json?");
        }
        for (field, value) in [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            ("attention_probs_dropout_prob", self.attention_probs_dropout_prob),
        ] {
            if !(0.0..1.0).contains(&value) {
                bail!("`{field}` is {value}; it must be in [0, 1)");
            }
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            bail!("`layer_norm_eps` is {}; it must be a positive number", self.layer_norm_eps);
        }
        if !(self.initializer_range.is_finite() && self.initializer_range >= 0.0) {
            bail!("`initializer_range` is {}; it must be a number ≥ 0", self.initializer_range);
        }
        if self.pad_token_id.is_some_and(|p| p >= self.vocab_size) {
            bail!("`pad_token_id` {} is not below `vocab_size` {}", self.pad_token_id.unwrap_or(0), self.vocab_size);
        }
        if self.num_attention_heads == 0 || self.hidden_size % self.num_attention_heads != 0 {
            bail!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size,
                self.num_attention_heads
            );
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Number of classes from `id2label` (2 when absent, as in HF).
    pub fn num_labels(&self) -> usize {
        self.id2label.as_ref().map(|m| m.len()).unwrap_or(2)
    }

    /// Sets `id2label` / `label2id` from names in class order.
    pub fn set_labels(&mut self, names: &[String]) {
        self.id2label = Some(names.iter().enumerate().map(|(i, n)| (i.to_string(), n.clone())).collect());
        self.label2id = Some(names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect());
    }

    /// Class names in index order (`LABEL_i` where unnamed).
    pub fn label_names(&self) -> Vec<String> {
        (0..self.num_labels())
            .map(|i| {
                self.id2label.as_ref().and_then(|m| m.get(&i.to_string()).cloned()).unwrap_or(format!("LABEL_{i}"))
            })
            .collect()
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a config serialises");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_config_round_trips_with_unknown_fields() {
        let text = r#"{"architectures":["BertModel"],"attention_probs_dropout_prob":0.1,"gradient_checkpointing":false,
            "hidden_act":"gelu","hidden_dropout_prob":0.1,"hidden_size":384,"initializer_range":0.02,
            "intermediate_size":1536,"layer_norm_eps":1e-12,"max_position_embeddings":512,"model_type":"bert",
            "num_attention_heads":12,"num_hidden_layers":6,"pad_token_id":0,"position_embedding_type":"absolute",
            "transformers_version":"4.8.2","type_vocab_size":2,"use_cache":true,"vocab_size":30522}"#;
        let c: BertConfig = serde_json::from_str(text).unwrap();
        assert_eq!((c.num_hidden_layers, c.hidden_size, c.head_dim()), (6, 384, 32));
        assert_eq!(c.extra["transformers_version"], "4.8.2");
        let again: BertConfig = serde_json::from_str(&c.to_json()).unwrap();
        assert_eq!(again, c);
        assert_eq!(c.num_labels(), 2);
    }

    #[test]
    fn presets_follow_the_miniatures() {
        let c = BertConfig::preset("mini", 30522).unwrap();
        assert_eq!((c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size), (4, 256, 4, 1024));
        assert!(BertConfig::preset("huge", 10).unwrap_err().to_string().contains("valid: tiny"));
    }
}
