//! `tomlite train` fine-tuning a tiny random BERT end to end, and the
//! classifier loading its adapters.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tomlite_models::bert::{BertModel, Config};

use crate::common::{Env, Ran, read_jsonl, record};

const VOCAB: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "i", "want", "to", "finish", "the", "report",
    "feel", "sad", "happy", "angry", "about", "my", "sister", "prefer", "short", "answers", "do",
    "not", "call", "me", "after", "nine", "bus", "leaves", "at", "eight", ".", "!",
];

/// Writes a 2-layer, 32-wide BERT with random weights and a WordPiece
/// tokenizer over [`VOCAB`] into `dir`.
fn write_tiny_model(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let config = json!({
        "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 32,
        "intermediate_size": 64, "layer_norm_eps": 1e-12, "max_position_embeddings": 32,
        "model_type": "bert", "num_attention_heads": 4, "num_hidden_layers": 2,
        "pad_token_id": 0, "position_embedding_type": "absolute", "type_vocab_size": 2,
        "vocab_size": VOCAB.len()
    });
    let cfg: Config = serde_json::from_value(config.clone()).unwrap();
    let varmap = VarMap::new();
    BertModel::load(
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
        &cfg,
    )
    .unwrap();
    varmap.save(dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let vocab: serde_json::Map<String, Value> = VOCAB
        .iter()
        .enumerate()
        .map(|(i, w)| ((*w).to_string(), json!(i)))
        .collect();
    let added: Vec<Value> = VOCAB[..5]
        .iter()
        .enumerate()
        .map(|(i, w)| {
            json!({"id": i, "content": w, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
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
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
}

/// (text, kinds, affect, intensity, style)
type Labeled = (
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static str,
    Option<&'static str>,
);

const RECORDS: &[Labeled] = &[
    (
        "I want to finish the report.",
        &["goal"],
        "neutral",
        "medium",
        None,
    ),
    (
        "I feel sad about my sister. I want to finish the report.",
        &["emotion", "goal"],
        "sad",
        "high",
        None,
    ),
    (
        "I prefer short answers.",
        &["preference"],
        "neutral",
        "low",
        Some("bullet_session"),
    ),
    (
        "Do not call me after nine!",
        &["boundary"],
        "angry",
        "high",
        Some("chat_excerpt"),
    ),
    (
        "The bus leaves at eight.",
        &[],
        "neutral",
        "low",
        Some("logistics_admin"),
    ),
    (
        "I feel happy about the report!",
        &["emotion"],
        "happy",
        "medium",
        Some("emoji_social"),
    ),
];

/// 36 labeled records (six texts, six ids each), some with a style, and
/// a GoEmotions folder, in `env`.
fn write_data(env: &Env) {
    let mut rows = Vec::new();
    for n in 0..6 {
        for (i, (text, kinds, affect, intensity, style)) in RECORDS.iter().enumerate() {
            // One sentence per kind quoted (the whole text when it is one).
            let quotes: Vec<String> = match text.split_once(". ") {
                Some((a, b)) if kinds.len() == 2 => vec![format!("{a}."), b.to_string()],
                _ => kinds.iter().map(|_| text.to_string()).collect(),
            };
            let mut r = json!({
                "id": format!("r{n}-{i}"), "persona_id": "ada",
                "created_at": format!("2026-11-{:02}T10:00:00Z", n + 1), "text": text,
                "gold": {"tom_kinds": kinds, "affect": affect, "intensity": intensity,
                         "source_quotes": quotes}
            });
            if let Some(s) = style {
                r["style"] = json!(s);
            }
            rows.push(r);
        }
    }
    env.jsonl("labeled.jsonl", &rows);
    env.write(
        "ge/labels.txt",
        "anger\nsadness\nnervousness\nconfusion\njoy\nneutral\n",
    );
    let ge: String = (0..24)
        .map(|i| {
            let (t, l) = [
                ("i feel angry", 0),
                ("i feel sad", 1),
                ("i feel happy", 4),
                ("the bus", 5),
            ][i % 4];
            format!("{t} {i}\t{l}\tid{i}\n")
        })
        .collect();
    env.write("ge/train.tsv", &ge);
    env.write("ge/dev.tsv", &ge);
    env.write("nodes.jsonl", "");
    write_tiny_model(&env.path("model"));
}

fn train(env: &Env, out: &str, extra: &[&str]) -> Ran {
    let mut args = vec![
        "--model-dir",
        "model",
        "--data",
        "labeled.jsonl",
        "--goemotions",
        "ge",
        "--nodes",
        "nodes.jsonl",
        "--cache",
        "none",
        "--out",
        out,
        "--seed",
        "5",
        "--goemotions-per-epoch",
        "12",
    ];
    if !extra.contains(&"--epochs") {
        args.extend(["--epochs", "1"]);
    }
    args.extend(extra);
    env.cmd("train", &args)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn sha256(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

fn annotate(env: &Env, heads: &str, out: &str, extra: &[&str]) -> Vec<Value> {
    let rows: Vec<Value> = RECORDS
        .iter()
        .enumerate()
        .map(|(i, r)| record(&format!("a{i}"), r.0))
        .collect();
    env.jsonl("records.jsonl", &rows);
    let mut args = vec![
        "--input",
        "records.jsonl",
        "--out",
        out,
        "--model-dir",
        "model",
        "--heads-dir",
        heads,
    ];
    args.extend(extra);
    env.cmd("annotate", &args).ok();
    read_jsonl(&env.path(out))
}

// `tomlite train` had no fine-tuning: it must fine-tune the encoder's
// adapters with the heads, write adapters, heads, card and a checkpoint,
// and a resumed run must continue that checkpoint to what one run gives.
#[test]
fn train_fine_tunes_a_tiny_bert_writes_adapters_card_checkpoint_and_resumes() {
    let env = Env::new();
    write_data(&env);
    let ran = train(&env, "out", &[]).ok();
    for f in [
        "adapters.safetensors",
        "adapters.json",
        "heads.safetensors",
        "card.json",
        "checkpoint/checkpoint.json",
        "checkpoint/checkpoint.safetensors",
    ] {
        assert!(
            env.path("out").join(f).is_file(),
            "{f} missing\n{}",
            ran.stderr
        );
    }
    assert!(ran.stderr.contains("epoch 1/1"), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("ex/s") && ran.stderr.contains("ETA"),
        "{}",
        ran.stderr
    );
    let card = read_json(&env.path("out/adapters.json"));
    let sha = sha256(&env.path("out/adapters.safetensors"));
    assert_eq!(card["adapters_sha256"], sha.as_str());
    assert_eq!(card["seed"], 5);
    assert_eq!(card["epochs"], 1);
    assert_eq!(
        card["base_sha256"],
        sha256(&env.path("model/model.safetensors")).as_str()
    );
    assert_eq!(
        card["data"]["files"]["ge/train.tsv"],
        sha256(&env.path("ge/train.tsv")).as_str()
    );
    assert!(
        card["data"]["files"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.ends_with("labeled.jsonl"))
    );
    assert_eq!(card["figures"]["epoch_losses"].as_array().unwrap().len(), 1);
    assert_eq!(card["figures"]["goemotions_per_epoch"], 12);
    assert_eq!(card["figures"]["similarity_weight"], 1.0);
    // data/sensitivity trains the sensitive head with the adapters.
    assert!(card["figures"]["sensitivity_examples"].as_u64().unwrap() > 200);
    assert_eq!(card["heads"]["sensitive"]["labels"][0], "none");
    // ... and the dev figures of the heads fitted on the adapters, ECE
    // before and after calibration per head.
    for head in ["tom_kind", "intensity"] {
        let m = &card["figures"]["dev"][head];
        assert!(
            m["ece_before"].is_number() && m["ece_after"].is_number(),
            "{head}: {m}"
        );
    }
    assert!(card["figures"]["dev"]["affect"]["goemotions_dev"]["ece_after"].is_number());
    // Records of a held-out style and the calibration slice never train
    // the encoder; every other record does, with its quotes.
    let held_out =
        |style: Option<&str>| style.is_some_and(|s| tomlite::train::HELD_OUT_STYLES.contains(&s));
    let trained = (0..6)
        .flat_map(|n| {
            RECORDS
                .iter()
                .enumerate()
                .map(move |(i, r)| (format!("r{n}-{i}"), r))
        })
        .filter(|(id, r)| {
            !held_out(r.4)
                && (r.4.is_some() || !tomlite_models::data::is_dev(id))
                && !tomlite::train::is_calibration(id)
        })
        .count();
    assert_eq!(card["figures"]["record_examples"], trained);
    // Each gold quote of the two-sentence record is a tom_kind example too.
    let two = (0..6)
        .map(|n| format!("r{n}-1"))
        .filter(|id| !tomlite_models::data::is_dev(id) && !tomlite::train::is_calibration(id))
        .count();
    assert_eq!(card["figures"]["sentence_examples"], 2 * two);
    // The heads fitted after fine-tuning name the adapters they belong to.
    let heads = read_json(&env.path("out/card.json"));
    assert_eq!(heads["training"]["adapters_sha256"], sha.as_str());
    assert!(
        heads["training_data"]["dev_split"]
            .as_str()
            .unwrap()
            .contains("emoji_social")
    );
    let cp = read_json(&env.path("out/checkpoint/checkpoint.json"));
    assert_eq!(cp["epoch"], 1);

    // Resume to 2 epochs: the checkpoint's epoch is not run again.
    let resumed = train(&env, "out", &["--resume", "--epochs", "2"]).ok();
    assert!(
        resumed.stderr.contains("resuming from its checkpoint"),
        "{}",
        resumed.stderr
    );
    assert!(resumed.stderr.contains("epoch 2/2"), "{}", resumed.stderr);
    assert!(!resumed.stderr.contains("epoch 1/2"), "{}", resumed.stderr);
    let card2 = read_json(&env.path("out/adapters.json"));
    assert_eq!(card2["epochs"], 2);
    assert_eq!(
        card2["figures"]["epoch_losses"].as_array().unwrap().len(),
        2
    );
    assert_eq!(
        card2["figures"]["epoch_losses"][0],
        card["figures"]["epoch_losses"][0]
    );
    assert_eq!(
        read_json(&env.path("out/checkpoint/checkpoint.json"))["epoch"],
        2
    );

    // One uninterrupted 2-epoch run with the same seed trains the same adapters.
    let whole = train(&env, "whole", &["--epochs", "2", "--resume"]).ok();
    assert!(
        whole.stderr.contains("no checkpoint yet"),
        "{}",
        whole.stderr
    );
    assert_eq!(
        sha256(&env.path("whole/adapters.safetensors")),
        sha256(&env.path("out/adapters.safetensors"))
    );

    // The classifier merges them at load and says so in its id.
    let anns = annotate(&env, "out", "tuned.jsonl", &[]);
    let id = anns[0]["annotator"].as_str().unwrap().to_string();
    assert!(id.contains("+lora+heads@"), "{id}");
    assert_eq!(anns.len(), RECORDS.len());
}

/// Writes `from`'s adapters with every B set to zero into `to`, and
/// returns the file's sha256.
fn zero_b_adapters(from: &Path, to: &Path) -> String {
    let ts = candle_core::safetensors::load(from, &Device::Cpu).unwrap();
    let zeroed: std::collections::HashMap<String, Tensor> = ts
        .into_iter()
        .filter(|(k, _)| !k.starts_with("head."))
        .map(|(k, t)| {
            let t = if k.ends_with(".lora_b") {
                t.zeros_like().unwrap()
            } else {
                t
            };
            (k, t)
        })
        .collect();
    candle_core::safetensors::save(&zeroed, to).unwrap();
    sha256(to)
}

// Adapters must change the annotator id (state never mixes models), and
// adapters that change nothing (B = 0) must give exactly the outputs of
// the encoder without them; heads trained without adapters refuse others.
#[test]
fn zero_adapters_annotate_as_without_and_change_the_annotator_id() {
    let env = Env::new();
    write_data(&env);
    train(&env, "heads", &["--frozen"]).ok();
    assert!(!env.path("heads/adapters.safetensors").exists());
    let plain = annotate(&env, "heads", "plain.jsonl", &[]);

    // eval --dev takes whole held-out styles (and the hashed 15 % of the
    // records without a style), and counts abstentions as misses.
    let ran = env
        .cmd(
            "eval",
            &[
                "--data",
                "labeled.jsonl",
                "--dev",
                "--json",
                "--model-dir",
                "model",
                "--heads-dir",
                "heads",
            ],
        )
        .ok();
    let report: Value = serde_json::from_str(&ran.stdout).unwrap();
    let held_out = (0..6)
        .flat_map(|n| {
            RECORDS
                .iter()
                .enumerate()
                .map(move |(i, r)| (format!("r{n}-{i}"), r))
        })
        .filter(|(id, r)| match r.4 {
            Some(s) => tomlite::train::HELD_OUT_STYLES.contains(&s),
            None => tomlite_models::data::is_dev(id),
        })
        .count();
    assert!(held_out >= 12, "{held_out}");
    assert_eq!(report[0]["records"], held_out);
    assert_eq!(report[0]["split"], "dev");
    let tom_kind = &report[0]["tom_kind"];
    let primary = tom_kind["primary_right"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&primary));
    // The argmax reading (the most likely kind, abstention or not), and
    // the abstentions among the records with a gold kind.
    let argmax = tom_kind["primary_right_argmax"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&argmax), "{tom_kind}");
    let with_kinds = tom_kind["records_with_kinds"].as_u64().unwrap();
    let abstained_with_kinds = tom_kind["abstained_with_kinds"].as_u64().unwrap();
    assert!(
        with_kinds > 0 && with_kinds <= held_out as u64,
        "{tom_kind}"
    );
    assert!(abstained_with_kinds <= tom_kind["abstained"].as_u64().unwrap());
    assert!(abstained_with_kinds <= with_kinds, "{tom_kind}");
    for head in ["affect", "intensity"] {
        assert!(
            report[0][head]["ece_before"].is_number(),
            "{head}: {}",
            report[0][head]
        );
    }

    // Adapters the heads were not trained with: refused, naming both.
    train(&env, "tuned", &[]).ok();
    let refused = env.cmd(
        "annotate",
        &[
            "--input",
            "records.jsonl",
            "--out",
            "x.jsonl",
            "--model-dir",
            "model",
            "--heads-dir",
            "heads",
            "--adapters",
            "tuned",
        ],
    );
    assert_ne!(refused.code, 0);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    let tuned = sha256(&env.path("tuned/adapters.safetensors"));
    assert!(
        refused.stderr.contains("trained with no adapters")
            && refused
                .stderr
                .contains(&format!("loaded with adapters {tuned}")),
        "{}",
        refused.stderr
    );

    // The same heads, their card naming zero-B adapters.
    let dir = env.path("zero");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["heads.safetensors", "card.json"] {
        std::fs::copy(env.path("heads").join(f), dir.join(f)).unwrap();
    }
    let sha = zero_b_adapters(
        &env.path("tuned/adapters.safetensors"),
        &env.path("zeroad/adapters.safetensors").tap_dir(),
    );
    let mut card = read_json(&dir.join("card.json"));
    card["training"]["adapters_sha256"] = json!(sha);
    std::fs::write(dir.join("card.json"), card.to_string()).unwrap();
    let zero = annotate(&env, "zero", "zero.jsonl", &["--adapters", "zeroad"]);

    // Frozen heads written over a fine-tuned folder take its adapters away.
    let ran = train(&env, "tuned", &["--frozen"]).ok();
    assert!(ran.stderr.contains("removed"), "{}", ran.stderr);
    assert!(!env.path("tuned/adapters.safetensors").exists());
    let refit = annotate(&env, "tuned", "refit.jsonl", &[]);
    assert!(!refit[0]["annotator"].as_str().unwrap().contains("lora"));
    // The heads file is the same: only the adapters tell the ids apart.
    let (a, b) = (
        plain[0]["annotator"].as_str().unwrap(),
        zero[0]["annotator"].as_str().unwrap(),
    );
    assert!(
        !a.contains("lora") && b.contains("+lora+heads@"),
        "{a} / {b}"
    );
    assert_ne!(a.rsplit('@').next(), b.rsplit('@').next());
    assert_eq!(plain.len(), zero.len());
    for (p, z) in plain.iter().zip(&zero) {
        for field in ["tags", "affect", "intensity", "edges"] {
            assert_eq!(p[field], z[field], "{field} of {}", p["record_id"]);
        }
    }
}

trait TapDir {
    fn tap_dir(self) -> Self;
}

impl TapDir for std::path::PathBuf {
    /// Creates the file's folder and gives the path back.
    fn tap_dir(self) -> Self {
        std::fs::create_dir_all(self.parent().unwrap()).unwrap();
        self
    }
}

// New labeled data or curated decisions should not cost another hour of
// fine-tuning: `train --adapters DIR` fits the heads on the encoder with
// an earlier run's adapters. Fitted the same way, they are the heads that
// run wrote, and the classifier reads the folder like the run's own.
#[test]
fn train_with_adapters_refits_the_heads_on_an_earlier_runs_adapters() {
    let env = Env::new();
    write_data(&env);
    train(&env, "out", &[]).ok();
    // With --adapters, --epochs counts the heads' passes (as with
    // --frozen); a fine-tuning run fits its heads with 30.
    let refit = train(&env, "refit", &["--adapters", "out", "--epochs", "30"]).ok();
    assert!(refit.stderr.contains("no fine-tuning"), "{}", refit.stderr);
    assert!(!refit.stderr.contains("epoch 1/1"), "{}", refit.stderr);
    assert!(!env.path("refit/checkpoint").exists());
    // The adapters' card is copied, its dev figures those of the new heads.
    assert_eq!(
        read_json(&env.path("refit/adapters.json"))["adapters_sha256"],
        read_json(&env.path("out/adapters.json"))["adapters_sha256"]
    );
    for f in ["adapters.safetensors", "heads.safetensors"] {
        assert_eq!(
            sha256(&env.path("refit").join(f)),
            sha256(&env.path("out").join(f)),
            "{f}"
        );
    }
    let card = read_json(&env.path("refit/card.json"));
    assert_eq!(
        card["training"]["adapters_sha256"],
        read_json(&env.path("out/adapters.json"))["adapters_sha256"]
    );
    assert_eq!(card["training"]["finetune"]["heads_refitted_from"], "out");
    // The run's own figures, not the dev figures of the heads fitted on the
    // adapters before (those belong to other heads).
    let run_figures = &read_json(&env.path("out/card.json"))["training"]["finetune"]["figures"];
    assert!(run_figures["epoch_losses"].is_array(), "{run_figures}");
    assert_eq!(card["training"]["finetune"]["figures"], *run_figures);
    assert!(card["training"]["finetune"]["figures"].get("dev").is_none());
    // The adapters' own card in the folder carries the new heads' figures.
    assert!(read_json(&env.path("refit/adapters.json"))["figures"]["dev"]["tom_kind"].is_object());
    let tuned = annotate(&env, "out", "tuned.jsonl", &[]);
    let refitted = annotate(&env, "refit", "refit.jsonl", &[]);
    // The same annotations; the id differs, because it covers the heads'
    // card and the refit's card says where its heads came from.
    let without_id = |rows: Vec<Value>| -> Vec<Value> {
        rows.into_iter()
            .map(|mut r| {
                r.as_object_mut().unwrap().remove("annotator");
                r
            })
            .collect()
    };
    assert_ne!(tuned[0]["annotator"], refitted[0]["annotator"]);
    assert_eq!(without_id(tuned), without_id(refitted));

    // Adapters whose file is not the card's are refused, naming the file.
    let bad = env.path("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::copy(env.path("out/adapters.json"), bad.join("adapters.json")).unwrap();
    let mut bytes = std::fs::read(env.path("out/adapters.safetensors")).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(bad.join("adapters.safetensors"), bytes).unwrap();
    let refused = train(&env, "refit2", &["--adapters", "bad"]);
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("bad/adapters.safetensors")
            && refused.stderr.contains("is not the card's"),
        "{}",
        refused.stderr
    );
    assert!(!env.path("refit2/heads.safetensors").exists());

    // --adapters fits heads on a fine-tuned encoder: with --frozen or
    // --resume it is a usage error.
    for other in ["--frozen", "--resume"] {
        let r = train(&env, "x", &["--adapters", "out", other]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains("--adapters"), "{}", r.stderr);
    }
}
