//! Evaluation metrics and calibration: macro-F1, per-label precision and
//! recall, expected calibration error, and temperature scaling.

use serde::Serialize;

/// Precision, recall and F1 of one label.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LabelScore {
    /// The label.
    pub label: String,
    /// Precision (0 when nothing was predicted).
    pub precision: f64,
    /// Recall (0 when the label never occurs).
    pub recall: f64,
    /// F1.
    pub f1: f64,
    /// Gold occurrences.
    pub support: usize,
}

/// Per-label scores and their macro average, for single-label predictions.
pub fn classification_report(
    labels: &[&str],
    gold: &[usize],
    pred: &[usize],
) -> (Vec<LabelScore>, f64) {
    assert_eq!(gold.len(), pred.len());
    let n = labels.len();
    let (mut tp, mut fp, mut fn_) = (vec![0usize; n], vec![0usize; n], vec![0usize; n]);
    for (&g, &p) in gold.iter().zip(pred) {
        if g == p {
            tp[g] += 1;
        } else {
            fp[p] += 1;
            fn_[g] += 1;
        }
    }
    scores(labels, &tp, &fp, &fn_)
}

/// Per-label scores and macro-F1 for multi-label predictions (sets of label indices).
pub fn multilabel_report(
    labels: &[&str],
    gold: &[Vec<usize>],
    pred: &[Vec<usize>],
) -> (Vec<LabelScore>, f64) {
    let n = labels.len();
    let (mut tp, mut fp, mut fn_) = (vec![0usize; n], vec![0usize; n], vec![0usize; n]);
    for (g, p) in gold.iter().zip(pred) {
        for &l in p {
            if g.contains(&l) {
                tp[l] += 1;
            } else {
                fp[l] += 1;
            }
        }
        for &l in g {
            if !p.contains(&l) {
                fn_[l] += 1;
            }
        }
    }
    scores(labels, &tp, &fp, &fn_)
}

fn scores(labels: &[&str], tp: &[usize], fp: &[usize], fn_: &[usize]) -> (Vec<LabelScore>, f64) {
    let per: Vec<LabelScore> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let p = ratio(tp[i], tp[i] + fp[i]);
            let r = ratio(tp[i], tp[i] + fn_[i]);
            LabelScore {
                label: (*l).to_string(),
                precision: p,
                recall: r,
                f1: if p + r > 0.0 {
                    2.0 * p * r / (p + r)
                } else {
                    0.0
                },
                support: tp[i] + fn_[i],
            }
        })
        .collect();
    let macro_f1 = per.iter().map(|s| s.f1).sum::<f64>() / per.len().max(1) as f64;
    (per, macro_f1)
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Expected calibration error over `bins` equal-width confidence bins:
/// the support-weighted mean gap between confidence and accuracy.
pub fn ece(confidence: &[f64], correct: &[bool], bins: usize) -> f64 {
    assert_eq!(confidence.len(), correct.len());
    if confidence.is_empty() {
        return 0.0;
    }
    let mut sum_c = vec![0.0; bins];
    let mut sum_a = vec![0.0; bins];
    let mut count = vec![0usize; bins];
    for (&c, &ok) in confidence.iter().zip(correct) {
        let b = ((c * bins as f64) as usize).min(bins - 1);
        sum_c[b] += c;
        sum_a[b] += if ok { 1.0 } else { 0.0 };
        count[b] += 1;
    }
    let n = confidence.len() as f64;
    (0..bins)
        .filter(|&b| count[b] > 0)
        .map(|b| (sum_c[b] - sum_a[b]).abs() / n)
        .sum()
}

/// Index and value of the largest probability (the first on ties; `(0, 0.0)` when empty).
pub fn argmax(p: &[f32]) -> (usize, f32) {
    p.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
        .map_or((0, 0.0), |(i, &v)| (i, v))
}

/// Softmax of `logits / t`.
pub fn softmax_t(logits: &[f32], t: f64) -> Vec<f64> {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits.iter().map(|&z| ((z as f64 - m) / t).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// Sigmoid of `z / t`.
pub fn sigmoid_t(z: f32, t: f64) -> f64 {
    1.0 / (1.0 + (-(z as f64) / t).exp())
}

/// The temperature that minimises the negative log-likelihood of `gold`
/// under `softmax(logits / t)` (golden-section search on log t in [0.05, 20]).
pub fn fit_temperature_softmax(logits: &[Vec<f32>], gold: &[usize]) -> f64 {
    let nll = |t: f64| -> f64 {
        logits
            .iter()
            .zip(gold)
            .map(|(z, &g)| -softmax_t(z, t)[g].max(1e-12).ln())
            .sum()
    };
    golden(nll)
}

/// The temperature that minimises the binary log-loss of sigmoid(z / t)
/// over every (item, label) pair: one temperature for a multi-label head.
pub fn fit_temperature_sigmoid(logits: &[Vec<f32>], gold: &[Vec<bool>]) -> f64 {
    let nll = |t: f64| -> f64 {
        let mut s = 0.0;
        for (z, g) in logits.iter().zip(gold) {
            for (&zi, &gi) in z.iter().zip(g) {
                let p = sigmoid_t(zi, t).clamp(1e-12, 1.0 - 1e-12);
                s -= if gi { p.ln() } else { (1.0 - p).ln() };
            }
        }
        s
    };
    golden(nll)
}

fn golden(f: impl Fn(f64) -> f64) -> f64 {
    let (mut a, mut b) = (0.05f64.ln(), 20f64.ln());
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = b - g * (b - a);
    let mut d = a + g * (b - a);
    let (mut fc, mut fd) = (f(c.exp()), f(d.exp()));
    for _ in 0..60 {
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - g * (b - a);
            fc = f(c.exp());
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + g * (b - a);
            fd = f(d.exp());
        }
    }
    ((a + b) / 2.0).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macro_f1_of_a_known_confusion() {
        let (per, m) = classification_report(&["a", "b"], &[0, 0, 1, 1], &[0, 1, 1, 1]);
        assert!((per[0].precision - 1.0).abs() < 1e-9 && (per[0].recall - 0.5).abs() < 1e-9);
        assert!((per[1].precision - 2.0 / 3.0).abs() < 1e-9 && (per[1].recall - 1.0).abs() < 1e-9);
        assert!((m - (2.0 / 3.0 + 0.8) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn argmax_takes_the_first_of_equal_maxima() {
        assert_eq!(argmax(&[0.1, 0.7, 0.7, 0.2]), (1, 0.7));
        assert_eq!(argmax(&[]), (0, 0.0));
    }

    #[test]
    fn ece_is_zero_when_confidence_matches_accuracy_and_large_when_not() {
        let conf = vec![0.75; 4];
        assert!(ece(&conf, &[true, true, true, false], 10) < 1e-9);
        assert!((ece(&[0.95; 4], &[false; 4], 10) - 0.95).abs() < 1e-9);
    }

    #[test]
    fn temperature_scaling_softens_overconfident_logits() {
        // Logits that are right only 60 % of the time but claim ~99 %.
        let logits: Vec<Vec<f32>> = (0..100).map(|_| vec![5.0, 0.0]).collect();
        let gold: Vec<usize> = (0..100).map(|i| usize::from(i % 5 >= 3)).collect();
        let t = fit_temperature_softmax(&logits, &gold);
        let p = softmax_t(&logits[0], t)[0];
        assert!((p - 0.6).abs() < 0.01, "t={t} p={p}");
        let conf_before: Vec<f64> = logits.iter().map(|z| softmax_t(z, 1.0)[0]).collect();
        let conf_after: Vec<f64> = logits.iter().map(|z| softmax_t(z, t)[0]).collect();
        let correct: Vec<bool> = gold.iter().map(|&g| g == 0).collect();
        assert!(ece(&conf_after, &correct, 10) < ece(&conf_before, &correct, 10));
    }
}

/// The probability that a tag is right, from the calibrated probabilities
/// of the two best tom_kinds.
///
/// Per-kind sigmoids judge each kind alone; whether the *best* kind is the
/// right one also depends on how close the runner-up is (two kinds both at
/// 0.8 are a coin toss between neighbours). This is a logistic regression
/// of "the tag is right" on `[1, logit(p_tag), logit(p_other)]`, fitted on
/// held-out scores: one for the primary tag (other = runner-up) and one for
/// the second tag (other = the primary).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TagCalibration {
    /// Coefficients for the primary tag: bias, own logit, runner-up logit.
    pub primary: [f64; 3],
    /// Coefficients for the second tag: bias, own logit, primary's logit.
    pub secondary: [f64; 3],
    /// Records it was fitted on.
    pub n: usize,
}

/// log(p / (1 - p)), with p clamped to [1e-6, 1 - 1e-6].
pub fn logit(p: f64) -> f64 {
    let p = p.clamp(1e-6, 1.0 - 1e-6);
    (p / (1.0 - p)).ln()
}

fn logistic3(w: &[f64; 3], own: f64, other: f64) -> f64 {
    let z = w[0] + w[1] * logit(own) + w[2] * logit(other);
    1.0 / (1.0 + (-z).exp())
}

/// Fits `[bias, w_own, w_other]` on `[1, logit(own), logit(other)]`.
fn fit_logistic3(rows: &[(f64, f64, bool)]) -> [f64; 3] {
    let x: Vec<([f64; 2], bool)> = rows
        .iter()
        .map(|&(own, other, y)| ([logit(own), logit(other)], y))
        .collect();
    fit_logistic(&x)
}

/// σ(w0 + w1·x1 + w2·x2).
pub fn logistic(w: &[f64; 3], x: [f64; 2]) -> f64 {
    1.0 / (1.0 + (-(w[0] + w[1] * x[0] + w[2] * x[1])).exp())
}

/// Fits a logistic regression `[bias, w1, w2]` on two features by Newton's
/// method on the mean log-loss, with a small ridge (1e-3) that keeps it
/// defined on separable data. Starts from `[0, 1, 0]`; no rows: that.
pub fn fit_logistic(rows: &[([f64; 2], bool)]) -> [f64; 3] {
    fit_logistic_ridge(rows, 1e-3)
}

/// [`fit_logistic`] with a chosen ridge; each Newton step is halved until
/// the penalised loss does not rise, so it converges on separable data.
pub fn fit_logistic_ridge(rows: &[([f64; 2], bool)], ridge: f64) -> [f64; 3] {
    let mut w = [0.0, 1.0, 0.0];
    if rows.is_empty() {
        return w;
    }
    let n = rows.len() as f64;
    let loss = |w: &[f64; 3]| -> f64 {
        rows.iter()
            .map(|&(f, y)| {
                let p = logistic(w, f).clamp(1e-12, 1.0 - 1e-12);
                -(if y { p.ln() } else { (1.0 - p).ln() })
            })
            .sum::<f64>()
            / n
            + ridge * w.iter().map(|x| x * x).sum::<f64>() / 2.0
    };
    for _ in 0..50 {
        let mut g = [0.0; 3];
        let mut h = [[0.0; 3]; 3];
        for &(f, y) in rows {
            let x = [1.0, f[0], f[1]];
            let p = logistic(&w, f);
            let r = p - if y { 1.0 } else { 0.0 };
            let s = (p * (1.0 - p)).max(1e-9);
            for i in 0..3 {
                g[i] += r * x[i] / n;
                for j in 0..3 {
                    h[i][j] += s * x[i] * x[j] / n;
                }
            }
        }
        for i in 0..3 {
            g[i] += ridge * w[i];
            h[i][i] += ridge;
        }
        let Some(mut step) = solve3(h, g) else { break };
        let before = loss(&w);
        let mut next = [w[0] - step[0], w[1] - step[1], w[2] - step[2]];
        for _ in 0..30 {
            if loss(&next) <= before + 1e-12 {
                break;
            }
            step = step.map(|s| s / 2.0);
            next = [w[0] - step[0], w[1] - step[1], w[2] - step[2]];
        }
        w = next;
        if step.iter().map(|s| s.abs()).fold(0.0, f64::max) < 1e-9 {
            break;
        }
    }
    w
}

/// Solves the 3×3 system `a·x = b` by Gaussian elimination with partial
/// pivoting; `None` when it is singular.
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-15 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..3 {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let s: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

impl TagCalibration {
    /// Fits both regressions. `rows`: per record, its calibrated per-kind
    /// probabilities and the gold kinds (indices).
    pub fn fit(rows: &[(Vec<f64>, Vec<usize>)]) -> Self {
        let mut primary = Vec::with_capacity(rows.len());
        let mut secondary = Vec::with_capacity(rows.len());
        for (p, gold) in rows {
            let mut order: Vec<usize> = (0..p.len()).collect();
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
            if let [k1, k2, ..] = order[..] {
                primary.push((p[k1], p[k2], gold.contains(&k1)));
                secondary.push((p[k2], p[k1], gold.contains(&k2)));
            }
        }
        Self {
            primary: fit_logistic3(&primary),
            secondary: fit_logistic3(&secondary),
            n: primary.len(),
        }
    }

    /// P(the primary tag is right) given its probability and the runner-up's.
    pub fn primary(&self, p_tag: f64, p_runner_up: f64) -> f64 {
        logistic3(&self.primary, p_tag, p_runner_up)
    }

    /// P(the second tag is right) given its probability and the primary's.
    pub fn secondary(&self, p_tag: f64, p_primary: f64) -> f64 {
        logistic3(&self.secondary, p_tag, p_primary)
    }
}

#[cfg(test)]
mod tag_calibration_tests {
    use super::*;

    #[test]
    fn ridge_fit_stays_finite_on_separable_data_and_recovers_a_known_model() {
        // Separable in x1: the unpenalised optimum is at infinity.
        let rows: Vec<([f64; 2], bool)> = (0..200)
            .map(|i| ([if i % 2 == 0 { 2.0 } else { -2.0 }, 0.0], i % 2 == 0))
            .collect();
        let w = fit_logistic_ridge(&rows, 0.01);
        assert!(w.iter().all(|x| x.is_finite() && x.abs() < 50.0), "{w:?}");
        assert!(logistic(&w, [2.0, 0.0]) > 0.95 && logistic(&w, [-2.0, 0.0]) < 0.05);
        // Data drawn from σ(0.5 + 1.5·x1 − x2): the fit comes back close.
        let mut rng = 12345u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let rows: Vec<([f64; 2], bool)> = (0..20_000)
            .map(|_| {
                let x = [next() * 4.0 - 2.0, next() * 4.0 - 2.0];
                let y = next() < logistic(&[0.5, 1.5, -1.0], x);
                (x, y)
            })
            .collect();
        let w = fit_logistic_ridge(&rows, 1e-4);
        for (a, b) in w.iter().zip([0.5, 1.5, -1.0]) {
            assert!((a - b).abs() < 0.1, "{w:?}");
        }
    }

    #[test]
    fn close_runner_ups_lower_the_tags_probability() {
        // Synthetic truth in the model's own family: P(primary right) =
        // σ(0.5 + 1.2·logit(p1) − 0.8·logit(p2)); the fit must recover it.
        let truth = [0.5, 1.2, -0.8];
        let mut rows = Vec::new();
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..20_000 {
            let p1 = 0.3 + 0.69 * next();
            let p2 = p1 * next();
            let right = next() < logistic3(&truth, p1, p2);
            let gold = if right { vec![0] } else { vec![2] };
            rows.push((vec![p1, p2, 0.001], gold));
        }
        let cal = TagCalibration::fit(&rows);
        assert_eq!(cal.n, 20_000);
        for (got, want) in cal.primary.iter().zip(truth) {
            assert!((got - want).abs() < 0.15, "{:?} vs {truth:?}", cal.primary);
        }
        assert!(cal.primary(0.9, 0.1) > cal.primary(0.9, 0.85));
    }

    #[test]
    fn solve3_solves_and_refuses_singular_systems() {
        let x = solve3(
            [[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]],
            [3.0, 5.0, 5.0],
        )
        .unwrap();
        for (got, want) in x.iter().zip([1.0, 1.0, 1.0]) {
            assert!((got - want).abs() < 1e-12);
        }
        assert!(
            solve3(
                [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]],
                [1.0, 2.0, 3.0]
            )
            .is_none()
        );
    }
}

/// How sure an edge candidate is, from how sure its link is and how sure
/// the kind of its sentence is (fitted by the trainer on held-out scores).
///
/// A registry or unknown-person edge: `P(edge right) = p_link ·
/// P(relation right)`, where `p_link` is the rate at which registry matches
/// of the same case class name a gold mention in the training records (or
/// P(person) for an unknown name) and `P(relation right) = σ(w0 + w1 ·
/// logit(p_kind))`, fitted on the training edges whose target is right;
/// `p_kind` is the calibrated probability of the kind the classifier gives
/// the quoted sentence. The product keeps a doubtful link doubtful however
/// sure the kind is (`will` is rarely the person Will).
///
/// A memory link: `σ(w0 + w1·logit(p_link) + w2·logit(p_kind))` with
/// `p_link = σ(a + b·cosine)` and `p_kind` the tag's confidence.
///
/// An edge is right when its target is a gold mention (a gold link) and its
/// relation one of the record's gold kinds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EdgeCalibration {
    /// P(link right) of a registry match written as the registry writes it.
    pub link_exact_case: f64,
    /// P(link right) of a registry match in another case (`dev` for `Dev`).
    pub link_other_case: f64,
    /// P(relation right) of registry and unknown-person edges: `[w0, w1, 0]`
    /// on `logit(p_kind)`.
    pub mention: [f64; 3],
    /// Registry matches it was fitted on.
    pub n_mentions: usize,
    /// An unknown candidate becomes an edge when P(person) reaches this.
    pub person_min: f64,
    /// P(memory link right) = σ(a + b·cosine): `[a, b]`.
    pub memory_cosine: [f64; 2],
    /// A memory link is proposed when its cosine reaches this (chosen by
    /// training: the lowest cosine whose training proposals are right
    /// often enough).
    pub memory_min_cosine: f64,
    /// Combination for memory links.
    pub memory: [f64; 3],
    /// Memory-link queries it was fitted on.
    pub n_memory: usize,
}

impl EdgeCalibration {
    /// P(relation right) of a mention's edge whose sentence has kind
    /// probability `p_kind`.
    pub fn relation(&self, p_kind: f64) -> f64 {
        logistic(&self.mention, [logit(p_kind), 0.0])
    }

    /// P(edge right) of a registry or unknown-person edge.
    pub fn mention(&self, p_link: f64, p_kind: f64) -> f64 {
        p_link * self.relation(p_kind)
    }

    /// P(link right) of a memory link at `cosine`.
    pub fn memory_link(&self, cosine: f64) -> f64 {
        let [a, b] = self.memory_cosine;
        1.0 / (1.0 + (-(a + b * cosine)).exp())
    }

    /// P(edge right) of a memory link.
    pub fn memory(&self, cosine: f64, p_kind: f64) -> f64 {
        logistic(
            &self.memory,
            [logit(self.memory_link(cosine)), logit(p_kind)],
        )
    }
}
