//! The memory-link threshold: proposals are made down to the lowest
//! cosine at which the ranked training proposals are right often enough.

/// Memory links are proposed down to the lowest cosine at which the
/// training proposals at or above it are right at least this often.
/// Whole-text embeddings separate follow-ups from look-alikes only weakly
/// (out-of-bag, even the surest ten are right 2–3 times in 10), so
/// proposals are for the curator: they quarantine below the policy's edge
/// threshold, and this keeps out the bulk of those that are wrong. A
/// precision over the ranked queries, not a pointwise P(link right): a
/// fine-tuned encoder spreads the cosines differently (its logistic fit
/// never reached 0.3 and no link was proposed) while ranking about as
/// well as the base encoder. One fifth, about three times the rate at
/// which a query's nearest earlier memory is its gold link (7 % of the
/// training queries): at a quarter the cut hung on one query at the top
/// of the ranking (two fine-tuned encoders with 8 right links in their 60
/// surest each: one had 4 right in its top 16 and proposed 16, the other
/// 3 and proposed none).
pub const MEMORY_LINK_MIN_PRECISION: f64 = 0.2;

/// The fewest training proposals [`MEMORY_LINK_MIN_PRECISION`] is read
/// over: the top one or two alone say little.
pub const MEMORY_LINK_MIN_PROPOSALS: usize = 10;

/// The lowest cosine at which the queries at or above it (at least
/// [`MEMORY_LINK_MIN_PROPOSALS`]) are right at least
/// [`MEMORY_LINK_MIN_PRECISION`] of the time; 1 (never propose) when no
/// such cosine exists.
pub fn ranked_min_cosine(queries: &[(f64, bool)]) -> f64 {
    let mut ranked: Vec<(f64, bool)> = queries.to_vec();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut right = 0usize;
    let mut min_cosine = 1.0;
    for (k, &(cosine, is_right)) in ranked.iter().enumerate() {
        right += usize::from(is_right);
        let n = k + 1;
        // A cut between tied cosines would propose both anyway.
        let at_tie = ranked.get(n).is_some_and(|next| next.0 == cosine);
        if n >= MEMORY_LINK_MIN_PROPOSALS
            && !at_tie
            && right as f64 >= MEMORY_LINK_MIN_PRECISION * n as f64
        {
            min_cosine = cosine;
        }
    }
    min_cosine.clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The threshold is the lowest cosine whose proposals at or above it
    // (ten at least) are right a fifth of the time.
    #[test]
    fn the_memory_link_threshold_is_the_lowest_cosine_with_enough_right_above_it() {
        // 0.99 .. 0.76 descending; right at ranks 1, 5, 12 and 16.
        let q: Vec<(f64, bool)> = (0..24)
            .map(|i| (0.99 - 0.01 * i as f64, [0, 4, 11, 15].contains(&i)))
            .collect();
        // Top 16: 4 right (0.25); top 20: 4 of 20 = 0.2; top 21: 0.19.
        let t = ranked_min_cosine(&q);
        assert!((t - 0.80).abs() < 1e-9, "{t}");
        // Order does not matter.
        let mut rev = q.clone();
        rev.reverse();
        assert_eq!(ranked_min_cosine(&rev), t);
        // Fewer than ten queries, or too few right: never propose.
        assert_eq!(ranked_min_cosine(&q[..9]), 1.0);
        let wrong: Vec<(f64, bool)> = q.iter().map(|&(c, _)| (c, c > 0.985)).collect();
        assert_eq!(ranked_min_cosine(&wrong), 1.0);
        assert_eq!(ranked_min_cosine(&[]), 1.0);
        // A cut is never placed between tied cosines.
        let mut tied = q.clone();
        tied[20].0 = tied[19].0;
        assert!((ranked_min_cosine(&tied) - 0.81).abs() < 1e-9);
    }
}
