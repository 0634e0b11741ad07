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
/// non-padding tokens, and one token type. ModernBERT (`modernbert`) is its own tree under
/// `model.` ([`super::modernbert`]): rotary positions, GeGLU, pre-norm without biases, local
/// and global attention; no token types, no pooler, no NSP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Bert,
    Roberta,
    ModernBert,
}

impl Family {
    /// The encoder's tensor-name prefix (`bert.encoder.layer.0…`, `roberta.encoder.layer.0…`).
    pub fn prefix(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Roberta => "roberta",
            Family::ModernBert => "model",
        }
    }

    /// The family's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Family::Bert => "BERT",
            Family::Roberta => "RoBERTa",
            Family::ModernBert => "ModernBERT",
        }
    }

    /// The share of tokens its MLM pretraining masks when the pipeline sets none: BERT's and
    /// RoBERTa's 15%, ModernBERT's 30%.
    pub fn masked_lm_prob(self) -> f64 {
        match self {
            Family::ModernBert => 0.3,
            Family::Bert | Family::Roberta => crate::sequence::pretrain::DEFAULT_MASKED_LM_PROB,
        }
    }

    /// Whether the model takes `token_type_ids` (segment B of a pair as type 1): BERT only.
    pub fn has_token_types(self) -> bool {
        self == Family::Bert
    }
}

/// ModernBERT's own `config.json` fields (HF's `ModernBertConfig`), read from the fields
/// [`BertConfig`] does not name; defaults are HF's. Older configs name the rotary bases
/// `global_rope_theta` / `local_rope_theta` and the pattern `global_attn_every_n_layers`; newer
/// ones `rope_parameters` and `layer_types`: both are read.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ModernBertSettings {
    pub hidden_activation: Activation,
    pub norm_eps: f64,
    pub norm_bias: bool,
    pub attention_bias: bool,
    pub mlp_bias: bool,
    pub classifier_bias: bool,
    pub decoder_bias: bool,
    pub classifier_activation: Activation,
    pub classifier_pooling: String,
    /// The whole window of a local layer: a token sees keys at most `local_attention / 2` away.
    pub local_attention: usize,
    pub global_attn_every_n_layers: usize,
    pub layer_types: Option<Vec<String>>,
    pub rope_parameters: Option<serde_json::Value>,
    pub global_rope_theta: Option<f64>,
    pub local_rope_theta: Option<f64>,
    pub embedding_dropout: f64,
    pub attention_dropout: f64,
    pub mlp_dropout: f64,
    pub initializer_cutoff_factor: f64,
}

impl Default for ModernBertSettings {
    fn default() -> Self {
        ModernBertSettings {
            hidden_activation: Activation::Gelu,
            norm_eps: 1e-5,
            norm_bias: false,
            attention_bias: false,
            mlp_bias: false,
            classifier_bias: false,
            decoder_bias: true,
            classifier_activation: Activation::Gelu,
            classifier_pooling: "cls".into(),
            local_attention: 128,
            global_attn_every_n_layers: 3,
            layer_types: None,
            rope_parameters: None,
            global_rope_theta: None,
            local_rope_theta: None,
            embedding_dropout: 0.0,
            attention_dropout: 0.0,
            mlp_dropout: 0.0,
            initializer_cutoff_factor: 2.0,
        }
    }
}

/// How ModernBERT's classifier reduces a row to one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The first token's hidden state.
    Cls,
    /// The mean over the row's tokens (padding excluded).
    Mean,
}

impl ModernBertSettings {
    /// Whether layer `i` attends globally (else within the local window).
    pub fn is_global(&self, layer: usize) -> bool {
        match &self.layer_types {
            Some(t) => t.get(layer).is_some_and(|t| t == "full_attention"),
            None => layer % self.global_attn_every_n_layers.max(1) == 0,
        }
    }

    /// The farthest key a local layer's token sees, either side (HF's `sliding_window`).
    pub fn half_window(&self) -> usize {
        self.local_attention / 2
    }

    /// The rotary base of global (`full_attention`) or local (`sliding_attention`) layers.
    pub fn rope_theta(&self, global: bool) -> f64 {
        let key = if global { "full_attention" } else { "sliding_attention" };
        let from_parameters = self.rope_parameters.as_ref().and_then(|p| p[key]["rope_theta"].as_f64());
        let old = if global { self.global_rope_theta } else { self.local_rope_theta };
        from_parameters.or(old).unwrap_or(if global { 160_000.0 } else { 10_000.0 })
    }

    pub fn pooling(&self) -> Pooling {
        if self.classifier_pooling == "mean" {
            Pooling::Mean
        } else {
            Pooling::Cls
        }
    }

    fn check(&self, layers: usize) -> Result<()> {
        if !matches!(self.classifier_pooling.as_str(), "cls" | "mean") {
            bail!("`classifier_pooling` is `{}`; ModernBERT pools by `cls` or `mean`", self.classifier_pooling);
        }
        if self.local_attention < 2 {
            bail!("`local_attention` is {}; the local window must be at least 2 tokens", self.local_attention);
        }
        if let Some(t) = &self.layer_types {
            if t.len() != layers {
                bail!("`layer_types` names {} layers, but num_hidden_layers is {layers}", t.len());
            }
            if let Some(bad) = t.iter().find(|t| !matches!(t.as_str(), "full_attention" | "sliding_attention")) {
                bail!("`layer_types` holds `{bad}`; ModernBERT layers are `full_attention` or `sliding_attention`");
            }
        }
        if let Some(p) = &self.rope_parameters {
            for key in ["full_attention", "sliding_attention"] {
                let kind = p[key]["rope_type"].as_str().unwrap_or("default");
                if kind != "default" {
                    bail!("`rope_parameters.{key}.rope_type` is `{kind}`; bertpipe builds the default rotary embedding only");
                }
            }
        }
        for (field, theta) in [("full_attention", self.rope_theta(true)), ("sliding_attention", self.rope_theta(false))]
        {
            if !(theta.is_finite() && theta > 1.0) {
                bail!("the rotary base of {field} layers is {theta}; it must be a number above 1");
            }
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0) {
            bail!("`norm_eps` is {}; it must be a positive number", self.norm_eps);
        }
        for (field, value) in [
            ("embedding_dropout", self.embedding_dropout),
            ("attention_dropout", self.attention_dropout),
            ("mlp_dropout", self.mlp_dropout),
        ] {
            if !(0.0..1.0).contains(&value) {
                bail!("`{field}` is {value}; it must be in [0, 1)");
            }
        }
        Ok(())
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

/// [`BertConfig`] fields a ModernBERT config.json does not have.
const BERT_ONLY: &[&str] = &[
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "type_vocab_size",
    "layer_norm_eps",
    "position_embedding_type",
];

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
        let text = crate::contract::reads::read_to_string(path)
            .with_context(|| format!("could not read '{}'", path.display()))?;
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
            Family::ModernBert => self.max_position_embeddings,
        }
    }

    /// The family `model_type` names (checked by [`Self::check`]; BERT for anything else).
    pub fn family(&self) -> Family {
        match self.model_type.as_str() {
            "roberta" | "xlm-roberta" | "camembert" => Family::Roberta,
            "modernbert" => Family::ModernBert,
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
            "modernbert" => "ModernBert",
            _ => "Bert",
        }
    }

    pub fn check(&self) -> Result<()> {
        match self.model_type.as_str() {
            "bert" | "roberta" | "xlm-roberta" | "camembert" | "modernbert" => {}
            other => bail!(
                "model_type `{other}` is not supported; bertpipe builds `bert`, `roberta` (and `xlm-roberta`, `camembert`) and `modernbert` models"
            ),
        }
        if self.family() == Family::ModernBert {
            self.modern()?.check(self.num_hidden_layers)?;
            if self.num_attention_heads > 0 && (self.hidden_size / self.num_attention_heads) % 2 != 0 {
                bail!(
                    "ModernBERT's rotary embedding needs an even head size; hidden_size {} / num_attention_heads {} is odd",
                    self.hidden_size,
                    self.num_attention_heads
                );
            }
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

    /// ModernBERT's own fields ([`ModernBertSettings`]), HF's defaults where absent.
    pub fn modern(&self) -> Result<ModernBertSettings> {
        serde_path_to_error::deserialize(serde_json::Value::Object(self.extra.clone()))
            .map_err(|e| anyhow::anyhow!("`{}`: {}", e.path(), e.inner()))
    }

    /// Sets ModernBERT fields kept in `extra` (`mlp_dropout`, …), as config.json has them.
    pub fn set_extra(&mut self, field: &str, value: serde_json::Value) {
        self.extra.insert(field.to_string(), value);
    }

    /// The dropout after the embeddings and each sublayer: BERT's `hidden_dropout_prob`,
    /// ModernBERT's `embedding_dropout` and `mlp_dropout`.
    pub fn set_hidden_dropout(&mut self, p: f64) {
        match self.family() {
            Family::ModernBert => {
                self.set_extra("embedding_dropout", p.into());
                self.set_extra("mlp_dropout", p.into());
            }
            Family::Bert | Family::Roberta => self.hidden_dropout_prob = p,
        }
    }

    /// The dropout on attention: BERT's `attention_probs_dropout_prob`, ModernBERT's
    /// `attention_dropout`.
    pub fn set_attention_dropout(&mut self, p: f64) {
        match self.family() {
            Family::ModernBert => self.set_extra("attention_dropout", p.into()),
            Family::Bert | Family::Roberta => self.attention_probs_dropout_prob = p,
        }
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
        let mut value = serde_json::to_value(self).expect("a config serialises");
        if self.family() == Family::ModernBert {
            // BERT's fields that ModernBERT names otherwise (`hidden_activation`, `norm_eps`, its
            // three dropouts) or lacks are not written: HF's `ModernBertConfig` checks types, and
            // would refuse `classifier_dropout: null`.
            let object = value.as_object_mut().expect("a config is an object");
            for field in BERT_ONLY {
                object.remove(*field);
            }
            if object.get("classifier_dropout").is_some_and(|v| v.is_null()) {
                object.remove("classifier_dropout");
            }
        }
        let mut s = serde_json::to_string_pretty(&value).expect("a config serialises");
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
    fn modernbert_configs_are_read_with_hf_defaults_and_checked() {
        let base = serde_json::json!({"model_type": "modernbert", "vocab_size": 100, "hidden_size": 32,
            "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 48});
        let c: BertConfig = serde_json::from_value(base.clone()).unwrap();
        c.check().unwrap();
        let m = c.modern().unwrap();
        assert_eq!(c.family(), Family::ModernBert);
        assert_eq!((m.half_window(), m.rope_theta(true), m.rope_theta(false)), (64, 160_000.0, 10_000.0));
        assert_eq!((0..4).map(|i| m.is_global(i)).collect::<Vec<_>>(), [true, false, false, true]);
        assert_eq!((m.norm_eps, m.decoder_bias, m.pooling()), (1e-5, true, Pooling::Cls));
        // Written back without BERT's own fields (HF's strict config would refuse a null dropout).
        let written: serde_json::Value = serde_json::from_str(&c.to_json()).unwrap();
        assert!(written.get("hidden_act").is_none() && written.get("classifier_dropout").is_none(), "{written}");
        let refused = |edit: serde_json::Value, says: &str| {
            let mut v = base.clone();
            v.as_object_mut().unwrap().extend(edit.as_object().unwrap().clone());
            let c: BertConfig = serde_json::from_value(v).unwrap();
            let err = format!("{:#}", c.check().unwrap_err());
            assert!(err.contains(says), "{err}");
        };
        refused(serde_json::json!({"num_attention_heads": 32, "hidden_size": 96}), "even head size");
        refused(serde_json::json!({"classifier_pooling": "max"}), "`cls` or `mean`");
        refused(serde_json::json!({"layer_types": ["full_attention"]}), "names 1 layers");
        refused(serde_json::json!({"layer_types": ["full_attention", "x", "x", "x"]}), "holds `x`");
        refused(
            serde_json::json!({"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1e4}}}),
            "default rotary embedding only",
        );
        refused(serde_json::json!({"local_attention": 1}), "at least 2 tokens");
        refused(serde_json::json!({"mlp_dropout": 1.5}), "`mlp_dropout`");
        refused(serde_json::json!({"norm_eps": "small"}), "norm_eps");
    }

    #[test]
    fn presets_follow_the_miniatures() {
        let c = BertConfig::preset("mini", 30522).unwrap();
        assert_eq!((c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size), (4, 256, 4, 1024));
        assert!(BertConfig::preset("huge", 10).unwrap_err().to_string().contains("valid: tiny"));
    }
}
