//! Loading and batching on a tiny random-weight BERT written by the test.

use std::path::Path;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use serde_json::json;
use sha2::{Digest, Sha256};
use tomlite_models::bert::{BertModel, Config};
use tomlite_models::{EncodeOptions, Encoder, Error};

use crate::{cosine, norm};

const VOCAB: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog",
    "ran", "home", ".", ",", "keep", "answers", "short", "##s", "sam", "likes",
];
const HIDDEN: usize = 32;

fn config_json() -> serde_json::Value {
    json!({
        "architectures": ["BertModel"],
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": HIDDEN,
        "intermediate_size": 64,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": 24,
        "model_type": "bert",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "vocab_size": VOCAB.len()
    })
}

/// A BERT WordPiece tokenizer.json over [`VOCAB`], with the same normalizer,
/// pre-tokenizer and `[CLS] A [SEP]` template as all-MiniLM-L6-v2's, and the
/// same 128-token truncation and fixed padding the encoder must switch off.
fn tokenizer_json() -> serde_json::Value {
    let vocab: serde_json::Map<String, serde_json::Value> = VOCAB
        .iter()
        .enumerate()
        .map(|(i, w)| ((*w).to_string(), json!(i)))
        .collect();
    let added: Vec<_> = VOCAB[..5]
        .iter()
        .enumerate()
        .map(|(i, w)| {
            json!({"id": i, "content": w, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    json!({
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": 128, "strategy": "LongestFirst", "stride": 0},
        "padding": {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": null,
                    "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}
            }
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab}
    })
}

/// Writes config.json, random weights (under `prefix`, if any) and
/// tokenizer.json into `dir`.
fn write_tiny_model(dir: &Path, prefix: Option<&str>) {
    let config_json = config_json();
    let config: Config = serde_json::from_value(config_json.clone()).expect("tiny config");
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let vb = match prefix {
        Some(p) => vb.pp(p),
        None => vb,
    };
    // Loading through a VarMap creates every tensor, with its real name.
    BertModel::load(vb, &config).expect("build tiny BERT");
    varmap
        .save(dir.join("model.safetensors"))
        .expect("save tiny weights");
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&config_json).expect("config json"),
    )
    .expect("write config.json");
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_vec_pretty(&tokenizer_json()).expect("tokenizer json"),
    )
    .expect("write tokenizer.json");
}

pub(crate) fn tiny_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    write_tiny_model(dir.path(), None);
    dir
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    let max = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(max < 1e-5, "{what}: max abs difference {max}");
}

#[test]
fn tiny_model_loads_and_encodes_unit_vectors() {
    let dir = tiny_dir();
    let encoder = Encoder::load(dir.path()).expect("load tiny model");
    assert_eq!(encoder.dim(), HIDDEN);
    let weights = std::fs::read(dir.path().join("model.safetensors")).expect("read weights");
    assert_eq!(encoder.sha256(), hex::encode(Sha256::digest(&weights)));

    let out = encoder
        .encode(&["The cat sat on the mat.", "Sam likes dogs"])
        .expect("encode");
    assert_eq!(out.embeddings.len(), 2);
    for v in &out.embeddings {
        assert_eq!(v.len(), HIDDEN);
        assert!((norm(v) - 1.0).abs() < 1e-5, "norm {}", norm(v));
        assert!(v.iter().all(|x| x.is_finite()));
    }
    // [CLS] the cat sat on the mat . [SEP]; [CLS] sam likes dog ##s [SEP]
    assert_eq!(out.stats.token_counts, vec![9, 6]);
    assert_eq!(out.stats.tokens, 15);
    // Packed: no padding is computed.
    assert_eq!(out.stats.padded_tokens, 0);
    assert_eq!(out.stats.batches, 1);
    assert!(out.stats.truncated.is_empty());
    assert!(cosine(&out.embeddings[0], &out.embeddings[1]) < 0.9999);
}

#[test]
fn batching_and_padding_do_not_change_vectors_or_order() {
    let dir = tiny_dir();
    let texts = [
        "a dog",
        "The cat sat on the mat, the dog ran home.",
        "keep answers short",
        "cat",
        "Sam likes cats and dogs.", // "and" is [UNK]
        "the mat",
    ];
    let mut encoder = Encoder::load(dir.path()).expect("load");
    let alone: Vec<Vec<f32>> = texts
        .iter()
        .map(|t| {
            encoder
                .encode(&[t])
                .expect("encode one")
                .embeddings
                .remove(0)
        })
        .collect();
    for batch_size in [1, 2, 4, 32] {
        encoder.set_batch_size(batch_size);
        let out = encoder.encode(&texts).expect("encode all");
        assert_eq!(out.stats.batches, texts.len().div_ceil(batch_size));
        assert_eq!(
            out.stats.tokens,
            out.stats.token_counts.iter().sum::<usize>()
        );
        for (i, (got, want)) in out.embeddings.iter().zip(&alone).enumerate() {
            assert_close(got, want, &format!("batch size {batch_size}, text {i}"));
        }
    }
    // A token budget packs texts of any lengths together; a text over it
    // runs alone.
    encoder.set_batch_size(256);
    let mut lengths = encoder.encode(&texts).expect("encode").stats.token_counts;
    lengths.sort_unstable_by(|a, b| b.cmp(a));
    for budget in [1, 12, 4096] {
        // Longest first, a batch closes before the text that would pass the budget.
        let mut batches = 0;
        let mut used = budget;
        for &n in &lengths {
            if used + n > budget {
                batches += 1;
                used = 0;
            }
            used += n;
        }
        encoder.set_batch_tokens(budget);
        let out = encoder.encode(&texts).expect("encode all");
        assert_eq!(out.stats.batches, batches, "budget {budget}");
        assert!(budget != 1 || batches == texts.len());
        assert!(budget != 4096 || batches == 1);
        for (i, (got, want)) in out.embeddings.iter().zip(&alone).enumerate() {
            assert_close(got, want, &format!("token budget {budget}, text {i}"));
        }
    }
}

#[test]
fn long_texts_are_truncated_and_reported() {
    let dir = tiny_dir();
    let options = EncodeOptions {
        max_tokens: 6,
        batch_size: 2,
        ..EncodeOptions::default()
    };
    let encoder = Encoder::load_with_options(dir.path(), options).expect("load");
    let long = "the cat sat on the mat";
    let cut = "the cat sat on";
    let out = encoder
        .encode(&["a dog", long, "cat", long])
        .expect("encode");
    assert_eq!(out.stats.token_counts, vec![4, 8, 3, 8]);
    assert_eq!(out.stats.truncated, vec![1, 3]);
    assert_eq!(out.stats.tokens, 4 + 6 + 3 + 6);
    // Truncation keeps the first word pieces and the final [SEP].
    let reference = encoder.encode(&[cut]).expect("encode cut");
    assert_eq!(reference.stats.token_counts, vec![6]);
    assert!(reference.stats.truncated.is_empty());
    assert_close(
        &out.embeddings[1],
        &reference.embeddings[0],
        "truncated text",
    );
    assert_close(
        &out.embeddings[3],
        &reference.embeddings[0],
        "truncated text",
    );
}

#[test]
fn max_tokens_is_capped_at_the_model_positions() {
    let dir = tiny_dir();
    let encoder = Encoder::load(dir.path()).expect("load");
    assert_eq!(encoder.options().max_tokens, 24);
    let long = ["the cat sat on the mat"; 5].join(" ");
    let out = encoder.encode(&[long.as_str()]).expect("encode");
    assert_eq!(out.stats.token_counts, vec![32]);
    assert_eq!(out.stats.truncated, vec![0]);
    assert_eq!(out.stats.tokens, 24);
}

#[test]
fn empty_input_gives_empty_output() {
    let dir = tiny_dir();
    let encoder = Encoder::load(dir.path()).expect("load");
    let out = encoder.encode(&[]).expect("encode nothing");
    assert!(out.embeddings.is_empty());
    assert_eq!(out.stats.batches, 0);
    // An empty text is still [CLS] [SEP].
    let out = encoder.encode(&[""]).expect("encode empty text");
    assert_eq!(out.stats.token_counts, vec![2]);
    assert!((norm(&out.embeddings[0]) - 1.0).abs() < 1e-5);
}

#[test]
fn bert_prefixed_checkpoint_loads() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_tiny_model(dir.path(), Some("bert"));
    let encoder = Encoder::load(dir.path()).expect("load bert.-prefixed weights");
    let out = encoder.encode(&["the cat"]).expect("encode");
    assert_eq!(out.embeddings[0].len(), HIDDEN);
}

#[test]
fn missing_model_names_the_path_and_fetch_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    let err = Encoder::load(&dir.path().join("all-MiniLM-L6-v2")).expect_err("no model");
    assert!(matches!(err, Error::MissingFile { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("scripts/fetch-model"), "{msg}");
    assert!(msg.contains("all-MiniLM-L6-v2/config.json"), "{msg}");

    // Only the weights missing: that file is named.
    write_tiny_model(dir.path(), None);
    std::fs::remove_file(dir.path().join("model.safetensors")).expect("rm");
    let msg = Encoder::load(dir.path())
        .expect_err("no weights")
        .to_string();
    assert!(msg.contains("model.safetensors"), "{msg}");
    assert!(msg.contains("scripts/fetch-model"), "{msg}");
}

#[test]
fn bad_files_give_errors_naming_them() {
    let dir = tiny_dir();
    std::fs::write(dir.path().join("tokenizer.json"), b"{ not json").expect("write");
    let err = Encoder::load(dir.path()).expect_err("bad tokenizer");
    assert!(matches!(err, Error::LoadTokenizer { .. }), "{err:?}");
    assert!(err.to_string().contains("tokenizer.json"));

    let dir = tiny_dir();
    std::fs::write(dir.path().join("model.safetensors"), b"garbage").expect("write");
    let err = Encoder::load(dir.path()).expect_err("bad weights");
    assert!(matches!(err, Error::LoadWeights { .. }), "{err:?}");
    assert!(err.to_string().contains("model.safetensors"));

    let dir = tiny_dir();
    let mut cfg = config_json();
    cfg["num_attention_heads"] = json!(5);
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).expect("write");
    let err = Encoder::load(dir.path()).expect_err("bad config");
    assert!(matches!(err, Error::UnsupportedConfig { .. }), "{err:?}");
}

#[test]
fn spans_pool_the_texts_own_token_states() {
    let dir = tiny_dir();
    let options = EncodeOptions {
        max_tokens: 8,
        batch_size: 4,
        ..EncodeOptions::default()
    };
    let encoder = Encoder::load_with_options(dir.path(), options).expect("load");
    // "the cat sat" (bytes 0..11), "on the mat" (12..22), "a dog" (23..28);
    // 8 tokens keep [CLS], the first 6 word pieces and [SEP].
    let text = "the cat sat on the mat a dog";
    let spans = vec![vec![(0, 11), (12, 22), (23, 28)]];
    let out = encoder
        .encode_with_spans(&[text, "cat"], &spans)
        .expect("encode with spans");
    assert_eq!(out.spans.len(), 2);
    assert!(
        out.spans[1].is_empty(),
        "no spans asked for the second text"
    );
    let vectors = &out.spans[0];
    assert_eq!(vectors.len(), 3);
    for v in vectors.iter().take(2) {
        let v = v.as_ref().expect("inside the window");
        assert_eq!(v.len(), encoder.dim());
        assert!((norm(v) - 1.0).abs() < 1e-5, "unit norm");
    }
    // "a dog" is past the 6 word pieces the window keeps: no vector.
    assert_eq!(out.stats.truncated, vec![0]);
    assert!(
        vectors[2].is_none(),
        "a span outside the window has no vector"
    );
    // Different sentences of one text pool to different vectors, and the
    // text's own embedding is unchanged by asking for spans.
    let (a, b) = (vectors[0].as_ref().unwrap(), vectors[1].as_ref().unwrap());
    assert!(cosine(a, b) < 0.9999);
    let plain = encoder.encode(&[text]).expect("encode");
    assert_close(&out.embeddings[0], &plain.embeddings[0], "text embedding");
}
