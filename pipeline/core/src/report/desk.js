// ---------- the curator's desk: corrections, decisions, keys, bulk, undo ----------
// Inlined into report.html's script by the report builder (one page, no
// network). A card's corrections (kind, affect, intensity, quote; an
// edge's relation and target) are kept in `store[item_id].edit` until the
// card is decided; an accepted card whose kind or target was corrected is
// exported as a relabel. Every decision (one card, or a bulk) is one step of
// the undo history, kept in localStorage beside the decisions.
var HIST_KEY = 'tomlite-history:' + (run.run_id || ''), FOCUS_KEY = 'tomlite-focus:' + (run.run_id || '');
var HIST_MAX = 500;
var AFFECT_KEYS = ['z', 'x', 'c', 'v', 'b', 'n'];    // angry sad anxious confused happy neutral
var INTENSITY_KEYS = ['s', 'd', 'f', 'g'];           // low medium high extreme
var steps = [];
try { steps = JSON.parse(localStorage.getItem(HIST_KEY) || '[]') || []; } catch (e) { steps = []; }
if (!Array.isArray(steps)) steps = [];
var focusId = null;
try { focusId = localStorage.getItem(FOCUS_KEY); } catch (e) { focusId = null; }
var utf8 = typeof TextEncoder === 'function' ? new TextEncoder() : null;

function saveHistory() {
  if (steps.length > HIST_MAX) steps = steps.slice(steps.length - HIST_MAX);
  try { localStorage.setItem(HIST_KEY, JSON.stringify(steps)); } catch (e) { /* save() reports storage trouble */ }
}
function editOf(id) { var st = store[id]; return (st && st.edit) || {}; }
function setEdit(id, key, value) {
  var st = store[id] || (store[id] = {}), ed = st.edit || (st.edit = {});
  if (value === null || value === undefined || value === '') delete ed[key]; else ed[key] = value;
}
// UTF-8 length of a JS (UTF-16) string: the byte offsets the tables use.
function utf8Len(s) {
  if (utf8) return utf8.encode(s).length;
  var n = 0;
  for (var i = 0; i < s.length; i++) {
    var c = s.charCodeAt(i);
    if (c < 0x80) n += 1; else if (c < 0x800) n += 2;
    else if (c >= 0xD800 && c <= 0xDBFF && i + 1 < s.length) { n += 4; i++; } else n += 3;
  }
  return n;
}
// The curator's quote of a card, if set: UTF-16 offsets for the page, byte offsets for the file.
function curatorQuote(it) { var q = editOf(it.item_id).quote; return q && num(q.s16) && num(q.e16) ? q : null; }
function optionsHTML(values, current, first) {
  var h = ['<option value="">' + esc(first) + '</option>'];
  values.forEach(function (v, i) { h.push('<option value="' + esc(v) + '"' + (current === v ? ' selected' : '') + '>' + esc(v) + '</option>'); });
  return h.join('');
}
// The corrections row of a card: affect and intensity (a tag), the relation (an edge), and the quote.
function fixesHTML(it) {
  var ed = editOf(it.item_id), h = [];
  if (it.item_type === 'edge') {
    h.push('<label>relation <select class="set-relation" aria-label="relation">' + optionsHTML(vocab.tom_kind || [], ed.label, 'as proposed (' + (it.label == null ? 'none' : it.label) + ')') + '</select></label>');
  } else {
    h.push('<label>affect <select class="set-affect" aria-label="affect">' + optionsHTML(vocab.affect || [], ed.affect, 'as annotated (' + (it.affect == null ? 'none' : it.affect) + ')') + '</select></label>');
    h.push('<label>intensity <select class="set-intensity" aria-label="intensity">' + optionsHTML(vocab.intensity || [], ed.intensity, 'as annotated (' + (it.intensity == null ? 'none' : it.intensity) + ')') + '</select></label>');
    var q = curatorQuote(it), text = texts[it.text];
    if (q && typeof text === 'string') {
      h.push('<span class="myquote">quote <q>' + esc(clipText(text.slice(q.s16, q.e16), 80)) + '</q> <span class="mono muted">bytes [' + q.start + ', ' + q.end + ')</span> <button class="clear-quote" type="button" title="back to the annotated quote">clear</button></span>');
    } else h.push('<span class="muted hint">select words in the record text to set the quote (<kbd>q</kbd>)</span>');
  }
  return '<div class="fixes">' + h.join('') + '</div>';
}
function clipText(s, n) { return s.length > n ? s.slice(0, n) + '…' : s; }

// ---------- deciding ----------
// The decision a card takes, with its corrections; a message when it cannot.
function resolveDecision(it, decision, card) {
  var st = store[it.item_id] || {}, ed = st.edit || {};
  var label = it.label === undefined ? null : it.label, target = it.target_node === undefined ? null : it.target_node;
  var out = { decision: decision, label: label, target_node: target, relabel_to: null };
  if (decision === 'reject') return out;
  if (it.item_type === 'edge') {
    var box = card ? card.querySelector('input.relabel-to') : null;
    var to = box ? box.value.trim() : (st.relabel_to || '');
    var rel = ed.label || null;
    if (decision === 'relabel' && !to) to = target || '';
    if (decision === 'relabel' && !to) return { msg: 'Choose a target node to relabel to.' };
    var moved = to && to !== target, relabelled = rel && rel !== label;
    if (decision === 'relabel' || moved || relabelled) {
      var dest = to || target;
      if (!dest || !(dest in nodeName)) return { msg: '“' + (dest || '') + '” is not a node of the registry: type to search, then pick one from the list.' };
      out.decision = 'relabel'; out.target_node = dest; out.relabel_to = dest; out.label = rel || label;
      return out;
    }
    if (!target || !(target in nodeName)) return { msg: 'The target is not in the registry: choose a node (t), or reject.' };
    if (label == null || !tomSet[label]) return { msg: '“' + label + '” is outside the vocabulary: set the relation (1–8), or reject.' };
    return out;
  }
  var sel = card ? card.querySelector('select.relabel-to') : null;
  var kind = ed.label || null;
  if (decision === 'relabel' && !kind) kind = (sel && sel.value) || st.relabel_to || null;
  if (decision === 'relabel' && !kind) return { msg: 'Choose a tom_kind to relabel to.' };
  if (kind && (decision === 'relabel' || kind !== label)) { out.decision = 'relabel'; out.label = kind; out.relabel_to = kind; }
  else if (label == null) return { msg: 'No label was read: set a kind (1–8), or reject.' };
  else if (!tomSet[label]) return { msg: '“' + label + '” is outside the vocabulary: set a kind (1–8), or reject.' };
  if (ed.affect) out.affect = ed.affect;
  if (ed.intensity) out.intensity = ed.intensity;
  var q = curatorQuote(it);
  if (q) { out.quote_start = q.start; out.quote_end = q.end; }
  return out;
}
function snapshot(id) { return store[id] ? JSON.parse(JSON.stringify(store[id])) : null; }
// Records the decision on the item (no render); a message when it cannot be taken.
function record(it, decision, card, bulk) {
  var r = resolveDecision(it, decision, card);
  if (r.msg) return r.msg;
  var st = store[it.item_id] || (store[it.item_id] = {});
  ['decision', 'label', 'target_node', 'relabel_to', 'affect', 'intensity', 'quote_start', 'quote_end', 'bulk'].forEach(function (k) { delete st[k]; });
  st.decision = r.decision; st.label = r.label; st.target_node = r.target_node;
  if (r.relabel_to) st.relabel_to = r.relabel_to;
  ['affect', 'intensity', 'quote_start', 'quote_end'].forEach(function (k) { if (r[k] !== undefined) st[k] = r[k]; });
  if (bulk) st.bulk = true;
  st.curator = currentCurator(); st.decided_at = new Date().toISOString();
  if (card) { var note = card.querySelector('.note'); if (note) st.note = note.value; }
  return null;
}
function decide(it, decision, card) {
  var before = snapshot(it.item_id);
  var msg = record(it, decision, card, false);
  if (msg) { cardMsg(it, msg); return false; }
  steps.push({ ids: [it.item_id], before: [before], what: decision, at: Date.now() });
  save(); saveHistory();
  afterChange(it, card, store[it.item_id].decision);
  return true;
}
function cardMsg(it, msg) {
  var card = cardEl(it.item_id), m = card && card.querySelector('.cardmsg');
  if (m) m.textContent = msg; else toast(it.item_id + ': ' + msg, null);
}
function undo(it, card) {
  var st = store[it.item_id];
  if (!st) return;
  var before = snapshot(it.item_id);
  var keep = {};
  if (st.note) keep.note = st.note;
  if (st.edit) keep.edit = st.edit;
  delete store[it.item_id];
  if (Object.keys(keep).length) store[it.item_id] = keep;
  steps.push({ ids: [it.item_id], before: [before], what: 'undo', at: Date.now() });
  save(); saveHistory();
  afterChange(it, card, null);
}
// `u`: takes back the last step (one decision, or a whole bulk).
function undoLast() {
  var step = steps.pop();
  if (!step) { toast('Nothing to undo.', null); return; }
  step.ids.forEach(function (id, i) {
    if (step.before[i]) store[id] = step.before[i]; else delete store[id];
  });
  save(); saveHistory();
  if (step.ids.length === 1 && byId[step.ids[0]]) focusId = step.ids[0];
  applyFilters(true);
  reveal(true);
  toast('Undid ' + (step.ids.length === 1 ? (step.what === 'undo' ? 'the undo on ' : 'the decision on ') + step.ids[0] : 'the bulk decision on ' + step.ids.length + ' items'), null);
}
function afterChange(it, card, decision) {
  if (F.undecided) applyFilters(true);
  else {
    card = card || cardEl(it.item_id);
    if (card) {
      var fresh = document.createElement('div');
      fresh.innerHTML = cardHTML(it);
      card.parentNode.replaceChild(fresh.firstChild, card);
    }
    updateCounter();
  }
  toast(decision ? (decision === 'accept' ? 'Accepted ' : decision === 'reject' ? 'Rejected ' : 'Relabelled ') + it.item_id : 'Undid the decision on ' + it.item_id, decision ? it : null);
}
function rerenderCard(it) {
  var card = cardEl(it.item_id);
  if (!card) return;
  var fresh = document.createElement('div');
  fresh.innerHTML = cardHTML(it);
  card.parentNode.replaceChild(fresh.firstChild, card);
}
// A correction on a card: kept as an edit; a card already accepted or
// relabelled is decided again with it (one undo step).
function correct(it, key, value) {
  var before = snapshot(it.item_id);
  setEdit(it.item_id, key, value);
  var d = decisionOf(it.item_id);
  if (d && d.decision !== 'reject') {
    var msg = record(it, d.decision === 'relabel' && it.item_type !== 'edge' && !editOf(it.item_id).label ? 'relabel' : 'accept', null, !!d.bulk);
    if (msg) { store[it.item_id] = before; save(); rerenderCard(it); cardMsg(it, msg); return; }
    steps.push({ ids: [it.item_id], before: [before], what: 'correct', at: Date.now() });
    saveHistory();
  }
  save();
  rerenderCard(it);
  updateCounter();
}
function cardEl(id) { return document.querySelector('#queue-list .item[data-item-id="' + CSS.escape(id) + '"]'); }

// ---------- bulk ----------
// The items of the current filter (every page) a bulk decision takes: undecided, and for accept, acceptable as they stand.
function bulkItems(decision) {
  var out = [];
  for (var i = 0; i < filtered.length; i++) {
    var it = filtered[i];
    if (decisionOf(it.item_id)) continue;
    if (decision === 'accept' && resolveDecision(it, 'accept', null).msg) continue;
    out.push(it);
  }
  return out;
}
function bulkDecide(decision) {
  var todo = bulkItems(decision), n = todo.length;
  if (!n) { toast('No undecided item shown can be ' + (decision === 'accept' ? 'accepted' : 'rejected') + ' as it stands.', null); return; }
  var undecided = 0;
  for (var i = 0; i < filtered.length; i++) if (!decisionOf(filtered[i].item_id)) undecided++;
  var skipped = undecided - n;
  var q = (decision === 'accept' ? 'Accept' : 'Reject') + ' all ' + n + ' item' + (n === 1 ? '' : 's') + ' shown by the current filter?' +
    (skipped ? '\n' + skipped + ' undecided item' + (skipped === 1 ? '' : 's') + ' shown cannot be accepted as ' + (skipped === 1 ? 'it stands' : 'they stand') + ' and ' + (skipped === 1 ? 'is' : 'are') + ' left.' : '') +
    '\nEach gets its own decision line, marked "bulk": true.';
  if (!window.confirm(q)) return;
  var ids = [], before = [];
  todo.forEach(function (it) {
    var b = snapshot(it.item_id);
    if (!record(it, decision, null, true)) { ids.push(it.item_id); before.push(b); }
  });
  steps.push({ ids: ids, before: before, what: 'bulk ' + decision, at: Date.now() });
  save(); saveHistory();
  applyFilters(true);
  toast((decision === 'accept' ? 'Accepted ' : 'Rejected ') + ids.length + ' items in bulk (u undoes them all).', null);
}
$('bulk-accept').addEventListener('click', function () { bulkDecide('accept'); });
$('bulk-reject').addEventListener('click', function () { bulkDecide('reject'); });

// ---------- sorting ----------
function headOf(it) { return it.item_type === 'edge' ? 'edge' : 'tom_kind'; }
function thresholdDistance(it) { var th = TH[headOf(it)]; return num(it.confidence) && num(th) ? Math.abs(it.confidence - th) : null; }
// `likely`: the item's confidence, highest first; `threshold`: |confidence − its head's threshold|, smallest first.
function valueSort(out, key) {
  var score = key === 'likely' ? function (it) { return num(it.confidence) ? -it.confidence : null; } : thresholdDistance;
  out.sort(function (a, b) {
    var sa = score(a), sb = score(b), ha = sa !== null, hb = sb !== null;
    if (ha !== hb) return ha ? -1 : 1;               // items without a confidence go last
    if (ha && sa !== sb) return sa - sb;
    return a.__i - b.__i;
  });
}

// ---------- focus ----------
function focusIndex() {
  if (!focusId || !byId[focusId]) return -1;
  var it = byId[focusId];
  for (var i = 0; i < filtered.length; i++) if (filtered[i] === it) return i;
  return -1;
}
// Outlines the focused card (the first of the page when the focus is off the page) and scrolls it into view.
function reveal(scroll) {
  var prevEl = document.querySelector('#queue-list .item.focus');
  var el = focusId ? cardEl(focusId) : null;
  if (!el) {
    el = document.querySelector('#queue-list .item');
    focusId = el ? el.getAttribute('data-item-id') : null;
  }
  if (prevEl && prevEl !== el) prevEl.classList.remove('focus');
  if (el) el.classList.add('focus');
  try { if (focusId) localStorage.setItem(FOCUS_KEY, focusId); } catch (e) { /* not fatal */ }
  if (el && scroll) {
    var bar = document.querySelector('#queue .filterbar'), top = bar ? bar.getBoundingClientRect().bottom : 0;
    var r = el.getBoundingClientRect();
    if (r.top < top + 4 || r.bottom > window.innerHeight - 4) {
      var target = r.height > window.innerHeight - top - 8 ? r.top - top - 8 : r.top - top - (window.innerHeight - top - r.height) / 2;
      window.scrollBy({ top: target, left: 0, behavior: 'instant' });
    }
  }
}
function focusAt(i) {
  if (!filtered.length) return;
  i = Math.max(0, Math.min(filtered.length - 1, i));
  focusId = filtered[i].item_id;
  var p = Math.floor(i / PAGE);
  if (p !== page) { page = p; renderPage(); }
  reveal(true);
}
function move(d) { var i = focusIndex(); focusAt(i < 0 ? page * PAGE : i + d); }
function focused() { return focusId && byId[focusId] && cardEl(focusId) ? byId[focusId] : null; }
// Decides the focused card and moves on to the next one.
function decideFocused(decision) {
  var it = focused(); if (!it) return;
  var i = focusIndex();
  if (!decide(it, decision, cardEl(it.item_id))) { reveal(true); return; }
  if (F.undecided) focusAt(i); else focusAt(i + 1);
}

// ---------- quote by selection ----------
// The selection inside a card's record text, as offsets into the record's text.
function selectionSpan(card) {
  var sel = window.getSelection();
  if (!sel || !sel.rangeCount || sel.isCollapsed) return null;
  var r = sel.getRangeAt(0);
  var startEl = r.startContainer.nodeType === 1 ? r.startContainer : r.startContainer.parentNode;
  var endEl = r.endContainer.nodeType === 1 ? r.endContainer : r.endContainer.parentNode;
  var src = startEl && startEl.closest ? startEl.closest('.rsrc') : null;
  if (!src || !card.contains(src) || !src.contains(endEl)) return null;
  var base = Number(src.getAttribute('data-at')) || 0;
  var pre = document.createRange();
  pre.selectNodeContents(src);
  pre.setEnd(r.startContainer, r.startOffset);
  var s = base + pre.toString().length;
  pre.setEnd(r.endContainer, r.endOffset);
  var e = base + pre.toString().length;
  return e > s ? [s, e] : null;
}
function quoteFromSelection(it, card, quiet) {
  if (it.item_type === 'edge') { if (!quiet) cardMsg(it, 'An edge keeps its quote; set it on the tag.'); return false; }
  var text = texts[it.text];
  if (typeof text !== 'string') return false;
  var span = selectionSpan(card);
  if (!span) { if (!quiet) cardMsg(it, 'Select words in this card\'s record text first.'); return false; }
  var s = snap(text, span[0], -1), e = snap(text, span[1], 1);
  // a quote does not start or end in white space
  while (s < e && /\s/.test(text[s])) s++;
  while (e > s && /\s/.test(text[e - 1])) e--;
  if (e <= s) return false;
  var start = utf8Len(text.slice(0, s));
  correct(it, 'quote', { s16: s, e16: e, start: start, end: start + utf8Len(text.slice(s, e)) });
  window.getSelection().removeAllRanges();
  return true;
}
$('queue-list').addEventListener('mouseup', function (e) {
  var card = e.target.closest('.item');
  if (!card || !e.target.closest('.rtext')) return;
  var it = byId[card.getAttribute('data-item-id')];
  if (it) { focusId = it.item_id; quoteFromSelection(it, card, true); reveal(false); }
});

// ---------- corrections from the card's menus ----------
$('queue-list').addEventListener('change', function (e) {
  var card = e.target.closest('.item'); if (!card) return;
  var it = byId[card.getAttribute('data-item-id')]; if (!it) return;
  var c = e.target.classList;
  if (c.contains('set-affect')) correct(it, 'affect', e.target.value);
  else if (c.contains('set-intensity')) correct(it, 'intensity', e.target.value);
  else if (c.contains('set-relation')) correct(it, 'label', e.target.value);
  else if (c.contains('relabel-to') && e.target.tagName === 'SELECT') setEdit(it.item_id, 'label', e.target.value), save();
});
$('queue-list').addEventListener('click', function (e) {
  var btn = e.target.closest('button.clear-quote');
  if (!btn) return;
  var it = byId[btn.closest('.item').getAttribute('data-item-id')];
  if (it) correct(it, 'quote', null);
});
$('queue-list').addEventListener('keydown', function (e) {
  // Enter in an edge's target box relabels the edge to that node.
  if (e.key !== 'Enter' || !e.target.classList.contains('relabel-to') || e.target.tagName !== 'INPUT') return;
  var card = e.target.closest('.item'), it = card && byId[card.getAttribute('data-item-id')];
  if (!it) return;
  e.preventDefault();
  e.target.blur();
  focusId = it.item_id;
  decideFocused('relabel');
});

// Another tab of this run (or the page before a reload, whose last writes
// can land a moment later) moved the focus or took a step.
window.addEventListener('storage', function (e) {
  if (e.key === FOCUS_KEY && e.newValue && byId[e.newValue] && e.newValue !== focusId) { focusId = e.newValue; reveal(false); }
  else if (e.key === HIST_KEY) { try { steps = JSON.parse(e.newValue || '[]') || []; } catch (x) { steps = []; } }
});

// ---------- counter ----------
function updateCounter() {
  var done = decidedCount(), now = Date.now(), times = [];
  $('decided-count').textContent = String(done);
  $('left-count').textContent = String(Q.length - done);
  // the rate: one-by-one decisions of the last 15 minutes
  for (var id in store) {
    var st = store[id];
    if (!st || !st.decision || st.bulk || !st.decided_at) continue;
    var t = Date.parse(st.decided_at);
    if (t > now - 15 * 60000) times.push(t);
  }
  var rate = '—';
  if (times.length >= 2) {
    var first = Math.min.apply(null, times), mins = Math.max((now - first) / 60000, 0.5);
    rate = (times.length / mins).toFixed(1);
  }
  $('rate').textContent = rate;
  var na = bulkItems('accept').length, nr = bulkItems('reject').length;
  $('bulk-accept').textContent = 'Accept all ' + na + ' shown'; $('bulk-accept').disabled = !na;
  $('bulk-reject').textContent = 'Reject all ' + nr + ' shown'; $('bulk-reject').disabled = !nr;
}
setInterval(function () { if (!document.hidden) updateCounter(); }, 15000);

// ---------- keys ----------
function showHelp(on) { $('keyhelp').hidden = !on; }
$('keyhelp-open').addEventListener('click', function () { showHelp(true); });
$('keyhelp').addEventListener('click', function (e) { if (e.target === this || e.target.id === 'keyhelp-close') showHelp(false); });
document.addEventListener('keydown', function (e) {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || e.isComposing) return;
  var k = e.key, t = e.target;
  if (k === 'Escape' && !$('keyhelp').hidden) { showHelp(false); e.preventDefault(); return; }
  if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable)) {
    if (k === 'Escape' && t.blur) t.blur();
    return;
  }
  if (k === '?') { showHelp($('keyhelp').hidden); e.preventDefault(); return; }
  if (!$('keyhelp').hidden) return;
  var it, i;
  if (k === 'j') move(1);
  else if (k === 'k') move(-1);
  else if (k === 'a') decideFocused('accept');
  else if (k === 'r') decideFocused('reject');
  else if (k === 'A') bulkDecide('accept');
  else if (k === 'R') bulkDecide('reject');
  else if (k === 'u') undoLast();
  else if (k === 'e') exportDecisions();
  else if (/^[1-8]$/.test(k)) {
    it = focused(); i = Number(k) - 1;
    if (!it || i >= (vocab.tom_kind || []).length) return;
    correct(it, 'label', vocab.tom_kind[i]);
  } else if ((i = AFFECT_KEYS.indexOf(k)) >= 0) {
    it = focused();
    if (!it || it.item_type === 'edge') return;
    var a = (vocab.affect || [])[i];
    if (a) correct(it, 'affect', editOf(it.item_id).affect === a ? null : a);
  } else if ((i = INTENSITY_KEYS.indexOf(k)) >= 0) {
    it = focused();
    if (!it || it.item_type === 'edge') return;
    var v = (vocab.intensity || [])[i];
    if (v) correct(it, 'intensity', editOf(it.item_id).intensity === v ? null : v);
  } else if (k === 'q') {
    it = focused();
    if (it) quoteFromSelection(it, cardEl(it.item_id), false);
  } else if (k === 'w') {
    it = focused();
    if (it && curatorQuote(it)) correct(it, 'quote', null);
  } else if (k === 't' || k === 'm') {
    it = focused();
    var box = it && cardEl(it.item_id).querySelector(k === 't' ? 'input.relabel-to' : 'input.note');
    if (box && !box.disabled) { box.focus(); if (k === 't') suggestNodes(box.value); }
  } else return;
  if (focused() || k === 'j' || k === 'k') reveal(k === 'j' || k === 'k');
  e.preventDefault();
});

// ---------- export ----------
// One line per decided item: the fields every line has, and those the curator set (only those).
function decisionLine(it, d, cur) {
  var line = {
    run_id: run.run_id || '', item_id: it.item_id, decision: d.decision,
    label: d.label === undefined ? (it.label === undefined ? null : it.label) : d.label,
    target_node: d.target_node === undefined ? (it.target_node === undefined ? null : it.target_node) : d.target_node,
    curator: d.curator || cur, note: d.note || '', decided_at: d.decided_at
  };
  // decisions stored by an earlier page kept only relabel_to
  if (d.decision === 'relabel' && d.relabel_to) { if (it.item_type === 'edge') line.target_node = d.relabel_to; else line.label = d.relabel_to; }
  if (d.affect) line.affect = d.affect;
  if (d.intensity) line.intensity = d.intensity;
  if (num(d.quote_start) && num(d.quote_end)) { line.quote_start = d.quote_start; line.quote_end = d.quote_end; }
  if (d.bulk) line.bulk = true;
  return line;
}
function exportDecisions() {
  var msg = $('export-msg'), cur = currentCurator();
  msg.className = '';
  if (!cur) {
    msg.textContent = 'Enter your name in “Curator” before exporting.';
    msg.className = 'err';
    $('curator').classList.add('invalid');
    $('curator').focus();
    return;
  }
  var lines = [];
  for (var i = 0; i < Q.length; i++) {
    var it = Q[i], d = decisionOf(it.item_id);
    if (d) lines.push(JSON.stringify(decisionLine(it, d, cur)));
  }
  var text = lines.length ? lines.join('\n') + '\n' : '';
  $('export-text').value = text;
  try {
    var blob = new Blob([text], { type: 'application/x-ndjson' });
    var link = document.createElement('a');
    link.href = URL.createObjectURL(blob); link.download = 'decisions.jsonl';
    document.body.appendChild(link); link.click(); link.remove();
    setTimeout(function () { URL.revokeObjectURL(link.href); }, 10000);
  } catch (e) { window.__tomliteShowError('Download failed (' + e.message + '); copy the text from the box instead.'); }
  msg.textContent = 'Exported ' + lines.length + ' decision' + (lines.length === 1 ? '' : 's') + ' to decisions.jsonl.';
  msg.className = 'ok';
}
$('export').addEventListener('click', exportDecisions);

// ---------- the curator's agreement (the next night's report) ----------
// `curate status`'s figures: per head and confidence bin, agreed/decided,
// bulk decisions apart, and whether each threshold holds.
(function renderAgreement() {
  var A = D.agreement;
  if (!A) return;
  var h = [];
  if (A.error) h.push('<p class="warn">The curated decisions could not be read: ' + esc(A.error) + '</p>');
  else {
    var heads = A.heads || {}, names = Object.keys(heads);
    var bins = names.length ? (heads[names[0]].bins || []).map(function (b) { return b.bin; }) : [];
    h.push('<p class="note-line">How often the curator agreed with the model, by the model\'s confidence, over the ' + fmtInt(A.applied) +
      ' applied decisions of this staging directory (agreed / decided; one-by-one decisions, bulk apart). The thresholds are not changed by it.</p>');
    h.push('<table id="agreement-table"><thead><tr><th>head</th><th class="n">threshold</th>' + bins.map(function (b) { return '<th class="n">' + esc(b) + '</th>'; }).join('') +
      '<th class="n">bulk</th><th>threshold holds?</th></tr></thead><tbody>');
    var cell = function (b) { return b && b.decided ? fmtInt(b.agreed) + '/' + fmtInt(b.decided) : '<span class="muted">–</span>'; };
    names.forEach(function (n) {
      var x = heads[n], at = x.at_or_above_threshold || {};
      var holds = x.threshold_holds === true ? '<span class="conf ok">holds</span>' : x.threshold_holds === false ? '<span class="conf below">does NOT hold</span>' : '<span class="muted">no decision at or above it yet</span>';
      if (num(at.rate)) holds += ' <span class="muted">(' + at.rate.toFixed(2) + ': ' + fmtInt(at.agreed) + '/' + fmtInt(at.decided) + ' at ≥ ' + fmtConf(x.threshold) + ')</span>';
      h.push('<tr data-head="' + esc(n) + '"><td>' + esc(n) + '</td><td class="n">' + fmtConf(x.threshold) + '</td>' +
        (x.bins || []).map(function (b) { return '<td class="n">' + cell(b) + '</td>'; }).join('') +
        '<td class="n">' + cell(x.bulk) + '</td><td>' + holds + '</td></tr>');
    });
    h.push('</tbody></table>');
  }
  $('agreement-body').innerHTML = h.join('');
  $('agreement').hidden = false;
  $('nav-agreement').hidden = false;
})();
