//! Plain embedding rows: the row-major `f32` matrix that callers hand to
//! the heads without naming candle ([`Rows`]), the [`HeadInput`] trait the
//! heads read their batches through, and the rows' safetensors cache file.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};

use crate::Error;

/// Rows of equal width, stored back to back (`len() * dim()` floats): a
/// batch of embeddings, or of embeddings with features appended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    data: Vec<f32>,
    dim: usize,
}

impl Rows {
    /// Rows of `dim` floats each from `data`; errors when `data` does not
    /// split into whole rows (or `dim` is 0 and `data` is not empty).
    pub fn new(data: Vec<f32>, dim: usize) -> Result<Self, Error> {
        // A width of 0 holds only no data.
        if !data.len().is_multiple_of(dim) {
            return Err(Error::RowsShape {
                floats: data.len(),
                dim,
            });
        }
        Ok(Self { data, dim })
    }

    /// The rows of `vectors`, each `dim` wide; errors on a vector of
    /// another width.
    pub fn from_vectors(vectors: &[Vec<f32>], dim: usize) -> Result<Self, Error> {
        if let Some(other) = vectors.iter().find(|v| v.len() != dim) {
            return Err(Error::RowsShape {
                floats: other.len(),
                dim,
            });
        }
        Ok(Self {
            data: vectors.concat(),
            dim,
        })
    }

    /// `parts`' rows one after the other; errors when their widths differ.
    pub fn concat(parts: &[&Rows]) -> Result<Self, Error> {
        let dim = parts.first().map_or(0, |p| p.dim);
        if let Some(other) = parts.iter().find(|p| p.dim != dim) {
            return Err(Error::RowsShape {
                floats: other.data.len(),
                dim,
            });
        }
        let data = parts.iter().flat_map(|p| p.data.iter().copied()).collect();
        Ok(Self { data, dim })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Width of a row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Row `index`; panics when out of range.
    pub fn row(&self, index: usize) -> &[f32] {
        &self.data[index * self.dim..(index + 1) * self.dim]
    }

    /// Every row, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[f32]> {
        (0..self.len()).map(|index| self.row(index))
    }

    /// All floats, row after row.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// Reads the rows stored under `name` in a safetensors file (as
    /// [`Rows::write_safetensors`] writes them).
    pub fn read_safetensors(path: &Path, name: &str) -> Result<Self, Error> {
        let failed = |source| Error::ReadRows {
            path: path.to_path_buf(),
            source,
        };
        let mut tensors = candle_core::safetensors::load(path, &Device::Cpu).map_err(failed)?;
        let tensor = tensors
            .remove(name)
            .ok_or_else(|| failed(candle_core::Error::Msg(format!("no tensor {name}"))))?;
        let (_, dim) = tensor.dims2().map_err(failed)?;
        let data = tensor
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(failed)?;
        Self::new(data, dim)
    }

    /// Writes the rows as the one tensor `name` (`[len, dim]`, f32) of a
    /// safetensors file.
    pub fn write_safetensors(&self, path: &Path, name: &str) -> Result<(), Error> {
        let failed = |source| Error::WriteRows {
            path: path.to_path_buf(),
            source,
        };
        let mut tensors = HashMap::new();
        tensors.insert(name.to_string(), self.tensor()?);
        candle_core::safetensors::save(&tensors, path).map_err(failed)
    }
}

/// A batch of rows a head reads: a candle `Tensor` `[n, dim]` inside this
/// crate, or plain [`Rows`] from callers that do not use candle.
pub trait HeadInput {
    /// The batch as a `[n, dim]` f32 tensor on the CPU.
    fn tensor(&self) -> Result<Tensor, Error>;
}

impl HeadInput for Tensor {
    fn tensor(&self) -> Result<Tensor, Error> {
        Ok(self.clone())
    }
}

impl HeadInput for Rows {
    fn tensor(&self) -> Result<Tensor, Error> {
        Ok(Tensor::from_vec(
            self.data.clone(),
            (self.len(), self.dim),
            &Device::Cpu,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_split_back_to_back_floats_and_refuse_partial_rows() {
        let rows = Rows::new(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3).unwrap();
        assert_eq!((rows.len(), rows.dim()), (2, 3));
        assert_eq!(rows.row(1), &[4.0, 5.0, 6.0]);
        assert_eq!(rows.iter().count(), 2);
        assert!(Rows::new(vec![1.0; 5], 3).is_err());
        assert!(Rows::new(vec![1.0], 0).is_err());
        assert!(Rows::new(Vec::new(), 0).unwrap().is_empty());
        assert!(Rows::from_vectors(&[vec![1.0, 2.0], vec![3.0]], 2).is_err());
    }

    #[test]
    fn concat_equals_the_tensor_concatenation() {
        let a = Rows::new((0..6).map(|v| v as f32).collect(), 2).unwrap();
        let b = Rows::from_vectors(&[vec![7.0, 8.0]], 2).unwrap();
        let both = Rows::concat(&[&a, &b]).unwrap();
        let cat = Tensor::cat(&[&a.tensor().unwrap(), &b.tensor().unwrap()], 0).unwrap();
        assert_eq!(
            both.tensor().unwrap().to_vec2::<f32>().unwrap(),
            cat.to_vec2::<f32>().unwrap()
        );
        assert!(Rows::concat(&[&a, &Rows::new(vec![1.0; 3], 3).unwrap()]).is_err());
    }

    #[test]
    fn rows_round_trip_through_safetensors_bit_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.safetensors");
        let rows = Rows::new(vec![0.1, -2.5, f32::MIN_POSITIVE, 3.0e7], 2).unwrap();
        rows.write_safetensors(&path, "embeddings").unwrap();
        assert_eq!(Rows::read_safetensors(&path, "embeddings").unwrap(), rows);
        assert!(Rows::read_safetensors(&path, "spans").is_err());
        let mut tensors = HashMap::new();
        tensors.insert("embeddings".to_string(), rows.tensor().unwrap());
        let direct = dir.path().join("direct.safetensors");
        candle_core::safetensors::save(&tensors, &direct).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&direct).unwrap()
        );
    }
}
