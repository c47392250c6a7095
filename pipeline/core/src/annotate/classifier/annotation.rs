//! A record's annotation from its scores: the tags, their quotes, the
//! affect and intensity, and the edges to people and earlier memories.

use super::*;

impl Classifier {
    /// Turns one record's scores into an annotation.
    pub fn annotation(&self, record: &Record, s: &Scores) -> Annotation {
        let text = record.text.as_str();
        let labels = &self.heads.tom_kind.spec.labels;
        let mut order: Vec<usize> = (0..s.tom_kind.len()).collect();
        order.sort_by(|&a, &b| s.tom_kind[b].total_cmp(&s.tom_kind[a]));
        // Each tag's confidence is P(tag right): from the card's tag
        // calibration when it has one, else the kind's own probability.
        let p = |k: usize| f64::from(s.tom_kind[k]);
        let cal = self.heads.card.tag_calibration.as_ref();
        let mut best = order.first().map(|&k| (labels[k].clone(), p(k)));
        let mut tags: Vec<(usize, f64)> = Vec::new();
        if let [k0, k1, ..] = order[..] {
            let c0 = cal.map_or(p(k0), |c| c.primary(p(k0), p(k1)));
            best = Some((labels[k0].clone(), c0));
            if c0 >= self.abstain_below {
                tags.push((k0, c0));
                let c1 = cal.map_or(p(k1), |c| c.secondary(p(k1), p(k0)));
                if c1 >= f64::from(SECOND_KIND_MIN) {
                    tags.push((k1, c1));
                }
            }
        } else if let [k0] = order[..]
            && p(k0) >= self.abstain_below
        {
            tags.push((k0, p(k0)));
        }
        let (ai, ac) = argmax(&s.affect);
        let (ii, ic) = argmax(&s.intensity);
        let edges = self.edges(record, s, &tags);
        Annotation {
            annotator: Some(self.id.clone()),
            tags: tags
                .iter()
                .map(|&(k, c)| {
                    let (qs, qe) = s.quotes[k];
                    TagCandidate {
                        tom_kind: Some(labels[k].clone()),
                        confidence: Some(round4(c)),
                        quote: Quote {
                            text: Some(text[qs..qe].to_string()),
                            start: Some(qs as u64),
                            end: Some(qe as u64),
                        },
                        problems: Vec::new(),
                    }
                })
                .collect(),
            affect: vec![Scored {
                label: Some(self.heads.affect.spec.labels[ai].clone()),
                confidence: Some(round4(f64::from(ac))),
                problems: Vec::new(),
            }],
            intensity: vec![Scored {
                label: Some(self.heads.intensity.spec.labels[ii].clone()),
                confidence: Some(round4(f64::from(ic))),
                problems: Vec::new(),
            }],
            edges,
            best: if tags.is_empty() {
                best.map(|(k, p)| (k, round4(p)))
            } else {
                None
            },
            embedding: Some(quantize(&s.embedding)),
            read_as: None,
            sensitive: self.detect_sensitive(text, s),
        }
    }

    /// Edge candidates of one record: its registry mentions, its unknown
    /// person-like names, and a link to its most similar earlier memory
    /// when it is tagged goal or unresolved_thread. Source is always
    /// `memory:<record id>`; one edge per target (its surest mention).
    fn edges(&self, record: &Record, scores: &Scores, tags: &[(usize, f64)]) -> Vec<EdgeCandidate> {
        let Some(calibration) = self.heads.card.edges.as_ref() else {
            return Vec::new();
        };
        let mut edges = RecordEdges {
            text: record.text.as_str(),
            source: format!("memory:{}", record.id),
            scores,
            tags,
            labels: &self.heads.tom_kind.spec.labels,
            calibration,
            by_target: Vec::new(),
        };
        // Every linked mention is proposed, however weak its relation: the
        // policy quarantines a weak one (`confidence_below_threshold`, its
        // confidence kept for the curator's queue) and counts it towards
        // `max_edges_per_record`. So are unknown people whose P(person)
        // reaches `person_min` (the curator adds the node), and a memory
        // link whose cosine reaches `memory_min_cosine`.
        if let Some(linker) = &self.linker {
            edges.linked_mentions(linker);
        }
        edges.unknown_people();
        // A goal or an unresolved thread: its most similar earlier memory.
        if let Some(&(kind, confidence)) = tags
            .iter()
            .find(|(kind, _)| MEMORY_LINK_KINDS.contains(&edges.labels[*kind].as_str()))
            && let Some((memory_id, cosine)) = self.nearest_earlier_memory(record, scores)
            && f64::from(cosine) >= calibration.memory_min_cosine
        {
            edges.memory_link(kind, confidence, memory_id, cosine);
        }
        edges.by_target.into_iter().map(|(_, edge)| edge).collect()
    }

    /// The memory of the record's persona most similar to it, among those
    /// committed before it (the record itself excluded).
    fn nearest_earlier_memory(&self, record: &Record, scores: &Scores) -> Option<(&str, f32)> {
        self.memories
            .nearest(&record.persona_id, &scores.embedding, |id| {
                id == record.id
                    || self.memory_times.as_ref().is_some_and(|times| {
                        times
                            .get(id)
                            .is_none_or(|created_at| *created_at >= record.created_at)
                    })
            })
    }
}

/// The edge candidates of one record while they are gathered: one per
/// target, the surest kept.
struct RecordEdges<'a> {
    text: &'a str,
    /// `memory:<record id>`.
    source: String,
    scores: &'a Scores,
    tags: &'a [(usize, f64)],
    /// The tom_kind labels, in the heads' order.
    labels: &'a [String],
    calibration: &'a EdgeCalibration,
    /// Target key (node id, `?<folded name>`, `memory:<id>`) → its edge.
    by_target: Vec<(String, EdgeCandidate)>,
}

impl RecordEdges<'_> {
    /// The sentence holding byte `pos` (the first when none does).
    fn sentence_of(&self, pos: usize) -> usize {
        self.scores
            .sentences
            .iter()
            .position(|&(start, end)| start <= pos && pos < end)
            .unwrap_or(0)
    }

    /// The kind the classifier gives a sentence: the tag's, when a tag
    /// quotes it; else the sentence's own most likely kind.
    fn kind_of(&self, sentence: usize) -> (usize, f64) {
        let span = self.scores.sentences.get(sentence).copied();
        self.tags
            .iter()
            .find(|(kind, _)| Some(self.scores.quotes[*kind]) == span)
            .map(|&(kind, confidence)| (kind, confidence))
            .unwrap_or_else(|| {
                self.scores
                    .sentence_kinds
                    .get(sentence)
                    .map_or((0, 0.0), |&(kind, p)| (kind, f64::from(p)))
            })
    }

    /// Keeps `edge` for `target` unless an edge as sure already has it.
    fn keep(&mut self, target: String, edge: EdgeCandidate) {
        match self.by_target.iter_mut().find(|(key, _)| *key == target) {
            Some((_, old)) if old.confidence >= edge.confidence => {}
            Some((_, old)) => *old = edge,
            None => self.by_target.push((target, edge)),
        }
    }

    /// An edge quoting the byte span `(start, end)` of the text.
    fn edge_quoting(
        &self,
        (start, end): (usize, usize),
        relation: usize,
        target_node: Option<String>,
        target_mention: Option<String>,
        confidence: f64,
    ) -> EdgeCandidate {
        EdgeCandidate {
            source_node: Some(self.source.clone()),
            relation: Some(self.labels[relation].clone()),
            target_node,
            target_mention,
            confidence: Some(round4(confidence)),
            quote: Quote {
                text: Some(self.text[start..end].to_string()),
                start: Some(start as u64),
                end: Some(end as u64),
            },
            problems: Vec::new(),
        }
    }

    /// A mention's edge: it quotes the mention's sentence (the whole text
    /// when there is none), with that sentence's kind.
    fn mention_edge(
        &self,
        sentence: usize,
        target_node: Option<String>,
        mention: &str,
        confidence: f64,
    ) -> EdgeCandidate {
        let span = (self.scores.sentences.get(sentence).copied()).unwrap_or((0, self.text.len()));
        let relation = self.kind_of(sentence).0;
        self.edge_quoting(
            span,
            relation,
            target_node,
            Some(mention.to_string()),
            confidence,
        )
    }

    /// One edge per registry node the text names.
    fn linked_mentions(&mut self, linker: &Linker) {
        let scores = self.scores;
        for linked in &scores.linked {
            let sentence = self.sentence_of(linked.start);
            let p_kind = self.kind_of(sentence).1;
            // A doubtful link (another case) or relation shows in its low
            // confidence.
            let p_link = if linked.exact_case {
                self.calibration.link_exact_case
            } else {
                self.calibration.link_other_case
            };
            let node = &linker.nodes()[linked.node].id;
            let mention = &self.text[linked.start..linked.end];
            let confidence = self.calibration.mention(p_link, p_kind);
            let edge = self.mention_edge(sentence, Some(node.clone()), mention, confidence);
            self.keep(node.clone(), edge);
        }
    }

    /// One edge per unknown person-like name whose P(person) reaches
    /// `person_min`, with no target node.
    fn unknown_people(&mut self) {
        let scores = self.scores;
        for (candidate, p_person) in &scores.unknown {
            if f64::from(*p_person) < self.calibration.person_min {
                continue;
            }
            let sentence = self.sentence_of(candidate.start);
            let p_kind = self.kind_of(sentence).1;
            let mention = &self.text[candidate.start..candidate.end];
            let confidence = self.calibration.mention(f64::from(*p_person), p_kind);
            let edge = self.mention_edge(sentence, None, mention, confidence);
            self.keep(format!("?{}", fold(mention)), edge);
        }
    }

    /// The edge of a `kind` tag (with its confidence) to the earlier memory
    /// `memory_id`, quoting the tag's sentence.
    fn memory_link(&mut self, kind: usize, confidence: f64, memory_id: &str, cosine: f32) {
        let target = format!("memory:{memory_id}");
        let confidence = self.calibration.memory(f64::from(cosine), confidence);
        let edge = self.edge_quoting(
            self.scores.quotes[kind],
            kind,
            Some(target.clone()),
            None,
            confidence,
        );
        self.keep(target, edge);
    }
}
