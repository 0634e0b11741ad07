//! A row of an evaluated split and what the model gave it: what [`super::eval`] produces and
//! [`super::gate`] compares.

/// One row's place and what is known about it before inference.
#[derive(Debug, Clone)]
pub struct RowMeta {
    pub index: usize,
    pub id: String,
    pub label: Option<i64>,
    pub doc_id: Option<String>,
    pub chunk: Option<i32>,
    pub tokens: usize,
    pub noise: Option<f32>,
    pub text: Option<String>,
}

/// One row's prediction.
#[derive(Debug, Clone)]
pub struct RowResult {
    pub meta: RowMeta,
    pub probs: Vec<f64>,
}
