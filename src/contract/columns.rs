//! Shard columns read as the contract's types from any Arrow type that means the same: what
//! pyarrow, polars or `datasets` write when a user rewrites a shard (`int32` labels,
//! `large_string` ids, `large_list` or fixed-size lists of ids, unsigned or wider integers).
//! Any other type, a null where the contract has none, or a value out of range is an error
//! naming the column (the caller adds the file): never a panic.

use anyhow::{bail, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;

/// `batch`'s column `name`, which the contract requires.
pub fn required<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch.column_by_name(name).with_context(|| format!("shard has no `{name}` column"))
}

const INTS: &str = "an integer type (int8 … int64, uint8 … uint64)";

/// Every value of an integer array (no nulls allowed).
fn int_values(values: &dyn Array, name: &str) -> Result<Vec<i64>> {
    if values.null_count() > 0 {
        bail!("column `{name}` holds nulls inside its values");
    }
    raw_ints(values, name)
}

/// An integer array's values, whatever is behind its nulls; uint64 beyond int64 saturates
/// (range checks then refuse it).
fn raw_ints(values: &dyn Array, name: &str) -> Result<Vec<i64>> {
    fn widen<T: ArrowPrimitiveType>(a: &dyn Array) -> Vec<i64>
    where
        T::Native: Into<i64>,
    {
        a.as_primitive::<T>().values().iter().map(|&v| v.into()).collect()
    }
    Ok(match values.data_type() {
        DataType::Int8 => widen::<Int8Type>(values),
        DataType::Int16 => widen::<Int16Type>(values),
        DataType::Int32 => widen::<Int32Type>(values),
        DataType::Int64 => widen::<Int64Type>(values),
        DataType::UInt8 => widen::<UInt8Type>(values),
        DataType::UInt16 => widen::<UInt16Type>(values),
        DataType::UInt32 => widen::<UInt32Type>(values),
        DataType::UInt64 => {
            values.as_primitive::<UInt64Type>().values().iter().map(|&v| i64::try_from(v).unwrap_or(i64::MAX)).collect()
        }
        other => bail!("column `{name}` holds {other}; bertpipe reads {INTS} there"),
    })
}

/// An integer column, nulls as `None`.
pub fn ints(col: &dyn Array, name: &str) -> Result<Vec<Option<i64>>> {
    if matches!(col.data_type(), DataType::Null) {
        return Ok(vec![None; col.len()]);
    }
    let values = raw_ints(col, name)?;
    Ok(values.into_iter().enumerate().map(|(i, v)| (!col.is_null(i)).then_some(v)).collect())
}

/// An integer column without nulls, each value in `lo..=hi`.
pub fn ints_in(col: &dyn Array, name: &str, lo: i64, hi: i64) -> Result<Vec<i64>> {
    let mut out = Vec::with_capacity(col.len());
    for (i, v) in ints(col, name)?.into_iter().enumerate() {
        let v = v.with_context(|| format!("row {i}: column `{name}` is null"))?;
        if v < lo || v > hi {
            bail!("row {i}: column `{name}` holds {v}, outside {lo}..={hi}");
        }
        out.push(v);
    }
    Ok(out)
}

/// A cell of a string column, whatever its Arrow string type (utf8, large_utf8, utf8_view);
/// `None` for a null, or when the column holds no strings.
pub fn string_at(col: &dyn Array, i: usize) -> Option<&str> {
    if col.is_null(i) {
        return None;
    }
    match col.data_type() {
        DataType::Utf8 => Some(col.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(col.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(col.as_string_view().value(i)),
        _ => None,
    }
}

/// A string column (utf8, large_utf8 or utf8_view), nulls as `None`.
pub fn strings(col: &dyn Array, name: &str) -> Result<Vec<Option<String>>> {
    match col.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            Ok((0..col.len()).map(|i| string_at(col, i).map(str::to_string)).collect())
        }
        DataType::Null => Ok(vec![None; col.len()]),
        other => {
            bail!("column `{name}` holds {other}; bertpipe reads a string type (utf8, large_utf8, utf8_view) there")
        }
    }
}

/// A string column without nulls.
pub fn strings_required(col: &dyn Array, name: &str) -> Result<Vec<String>> {
    strings(col, name)?
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.with_context(|| format!("row {i}: column `{name}` is null")))
        .collect()
}

/// A column read as text for a report, whatever wrote it: any string type, a dictionary of
/// strings (a pandas `category`), binary holding UTF-8 (Spark writes strings so), integers
/// (ids a tool wrote as numbers) as their decimal digits; nulls as `None`. Anything else, or
/// binary that is not UTF-8, is an error naming the column and the row (`first_row`: the
/// shard's row number of the column's first).
pub fn texts(col: &dyn Array, name: &str, first_row: u64) -> Result<Vec<Option<String>>> {
    if let Some(dict) = col.as_any_dictionary_opt() {
        let values = texts(dict.values().as_ref(), name, 0)
            .map_err(|e| anyhow::anyhow!("column `{name}`: a value of its dictionary: {e:#}"))?;
        let keys = dict.normalized_keys();
        return Ok((0..col.len()).map(|i| if col.is_null(i) { None } else { values[keys[i]].clone() }).collect());
    }
    let binary = |i: usize| -> Option<&[u8]> {
        match col.data_type() {
            DataType::Binary => Some(col.as_binary::<i32>().value(i)),
            DataType::LargeBinary => Some(col.as_binary::<i64>().value(i)),
            DataType::BinaryView => Some(col.as_binary_view().value(i)),
            _ => None,
        }
    };
    match col.data_type() {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => (0..col.len())
            .map(|i| match col.is_null(i) {
                true => Ok(None),
                false => String::from_utf8(binary(i).unwrap_or_default().to_vec()).map(Some).map_err(|_| {
                    anyhow::anyhow!("row {}: column `{name}` holds bytes that are not UTF-8 text", first_row + i as u64)
                }),
            })
            .collect(),
        t if t.is_integer() => Ok(ints(col, name)?.into_iter().map(|v| v.map(|v| v.to_string())).collect()),
        // pandas writes an integer column with a null as float64: whole numbers are its ids.
        DataType::Float16 | DataType::Float32 | DataType::Float64 => floats64(col)
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(Some(format!("{x:.0}"))),
                Some(x) => {
                    bail!("row {}: column `{name}` holds {x}, neither text nor a whole number", first_row + i as u64)
                }
                None => Ok(None),
            })
            .collect(),
        _ => strings(col, name),
    }
}

/// A column read as numbers for a report, whatever wrote it: integers, floats, booleans (0 and
/// 1), a dictionary of those, or strings that parse as numbers (`"1"`); nulls as `None`.
/// Anything else is an error naming the column (and the row: `first_row` is the shard's row
/// number of the column's first).
pub fn numbers(col: &dyn Array, name: &str, first_row: u64) -> Result<Vec<Option<f64>>> {
    if let Some(dict) = col.as_any_dictionary_opt() {
        let values = numbers(dict.values().as_ref(), name, 0)
            .map_err(|e| anyhow::anyhow!("column `{name}`: a value of its dictionary: {e:#}"))?;
        let keys = dict.normalized_keys();
        return Ok((0..col.len()).map(|i| if col.is_null(i) { None } else { values[keys[i]] }).collect());
    }
    match col.data_type() {
        t if t.is_integer() => Ok(ints(col, name)?.into_iter().map(|v| v.map(|v| v as f64)).collect()),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => Ok(floats64(col).into_iter().collect()),
        DataType::Boolean => {
            let b = col.as_boolean();
            Ok((0..col.len()).map(|i| (!col.is_null(i)).then(|| if b.value(i) { 1.0 } else { 0.0 })).collect())
        }
        DataType::Null => Ok(vec![None; col.len()]),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => (0..col.len())
            .map(|i| match string_at(col, i) {
                None => Ok(None),
                Some(s) => s.trim().parse::<f64>().map(Some).map_err(|_| {
                    anyhow::anyhow!("row {}: column `{name}` holds {s:?}, which is not a number", first_row + i as u64)
                }),
            })
            .collect(),
        other => bail!("column `{name}` holds {other}; bertpipe reads numbers there"),
    }
}

/// A float column's values in f64 (the caller checked the type), nulls as `None`.
fn floats64(col: &dyn Array) -> Vec<Option<f64>> {
    (0..col.len())
        .map(|i| {
            (!col.is_null(i)).then(|| match col.data_type() {
                DataType::Float16 => col.as_primitive::<Float16Type>().value(i).to_f64(),
                DataType::Float32 => col.as_primitive::<Float32Type>().value(i) as f64,
                _ => col.as_primitive::<Float64Type>().value(i),
            })
        })
        .collect()
}

/// A float column (float16, float32 or float64), nulls as `None`.
pub fn floats(col: &dyn Array, name: &str) -> Result<Vec<Option<f32>>> {
    let value = |i: usize| -> f32 {
        match col.data_type() {
            DataType::Float16 => col.as_primitive::<Float16Type>().value(i).to_f32(),
            DataType::Float32 => col.as_primitive::<Float32Type>().value(i),
            _ => col.as_primitive::<Float64Type>().value(i) as f32,
        }
    };
    match col.data_type() {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            Ok((0..col.len()).map(|i| (!col.is_null(i)).then(|| value(i))).collect())
        }
        DataType::Null => Ok(vec![None; col.len()]),
        other => bail!("column `{name}` holds {other}; bertpipe reads a float type there"),
    }
}

/// A list-of-integers column (list, large_list or fixed_size_list), no null rows or values;
/// each value in `lo..=hi` (a range `T` holds), each row built straight as `T`.
pub fn int_lists<T: TryFrom<i64>>(col: &dyn Array, name: &str, lo: i64, hi: i64) -> Result<Vec<Vec<T>>> {
    if col.null_count() > 0 {
        let i = (0..col.len()).find(|&i| col.is_null(i)).unwrap_or(0);
        bail!("row {i}: column `{name}` is null");
    }
    let (offsets, values): (Vec<usize>, ArrayRef) = match col.data_type() {
        DataType::List(_) => {
            let l = col.as_list::<i32>();
            (l.offsets().iter().map(|&o| o as usize).collect(), l.values().clone())
        }
        DataType::LargeList(_) => {
            let l = col.as_list::<i64>();
            (l.offsets().iter().map(|&o| o as usize).collect(), l.values().clone())
        }
        DataType::FixedSizeList(_, n) => {
            let l = col.as_fixed_size_list();
            let (n, start) = (*n as usize, l.offset() * *n as usize);
            ((0..=l.len()).map(|i| start + i * n).collect(), l.values().clone())
        }
        other => bail!("column `{name}` holds {other}; bertpipe reads a list of integers there (list, large_list or fixed_size_list of {INTS})"),
    };
    let flat = int_values(values.as_ref(), name)?;
    let mut rows = Vec::with_capacity(col.len());
    for (i, w) in offsets.windows(2).enumerate() {
        let row =
            flat.get(w[0]..w[1]).with_context(|| format!("row {i}: column `{name}` has offsets past its values"))?;
        if let Some(v) = row.iter().find(|&&v| v < lo || v > hi) {
            bail!("row {i}: column `{name}` holds {v}, outside {lo}..={hi}");
        }
        rows.push(row.iter().map(|&v| T::try_from(v).ok().expect("a value in lo..=hi fits T")).collect());
    }
    Ok(rows)
}
