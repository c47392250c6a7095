"""A curator's whole session on the report page, by keys alone.

On a fresh run of the bundled sample (28 queued items): 20 decisions that
correct the kind, the affect, the intensity, an edge's relation and target,
and a quote selected in a non-ASCII record (its UTF-8 byte offsets checked);
keys typed into a note do nothing else; one decision undone with `u`; a bulk
accept of what is left (the dialog names N; dismissed once, then
confirmed); the help overlay; the sort orders by value; export with `e`;
a reload keeps it all; `tomlite curate apply`; and curated.parquet read back
(pyarrow) holds every corrected field.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

import pyarrow.parquet as pq
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

AFFECT_KEYS = "zxcvbn"
INTENSITY_KEYS = "sdfg"
# Quotes the curator selects: words after non-ASCII characters, so UTF-16
# and UTF-8 offsets differ.
QUOTES = {"m-009#tag0": "he plays it on every release night",
          "s-010#tag0": "She wants it back before her Friday presentation"}

# Selects [start, end) (UTF-16 offsets of the record's text) in a card's record text.
SELECT_JS = """
var card = document.querySelector('#queue .item[data-item-id="' + arguments[0] + '"]');
var src = card.querySelector('.rtext .rsrc'), base = Number(src.getAttribute('data-at'));
var s = arguments[1] - base, e = arguments[2] - base, pos = 0, n, range = document.createRange(), started = false;
var walker = document.createTreeWalker(src, NodeFilter.SHOW_TEXT);
while ((n = walker.nextNode())) {
  var len = n.data.length;
  if (!started && s <= pos + len) { range.setStart(n, s - pos); started = true; }
  if (started && e <= pos + len) { range.setEnd(n, e - pos); break; }
  pos += len;
}
var sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
return sel.toString();
"""


def u16(text, i):
    """The UTF-16 offset of code point index i."""
    return len(text[:i].encode("utf-16-le")) // 2


def keyboard_session(tomlite, root, check):
    tmp = tempfile.mkdtemp(prefix="tomlite-keys-")
    staging = os.path.join(tmp, "staging")
    data = os.path.join(root, "data", "sample")
    subprocess.run(
        [tomlite, "run", "--input", f"{data}/records.jsonl", "--nodes", f"{data}/nodes.jsonl",
         "--annotations", f"{data}/annotations.jsonl", "--staging", staging],
        check=True, stdout=subprocess.DEVNULL)
    run_id = open(os.path.join(staging, "LATEST")).read().strip()
    run_dir = os.path.join(staging, "runs", run_id)
    downloads = os.path.join(tmp, "downloads")
    os.makedirs(downloads)
    opts = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"]:
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {"download.default_directory": downloads,
                                           "download.prompt_for_download": False})
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")))
    try:
        expected, bulk_n, undone = drive(driver, run_dir, check)
        exported = driver.find_element(By.ID, "export-text").get_attribute("value")
        driver.save_screenshot(os.path.join(tmp, "keys.png"))
        # A reload keeps the decisions, the corrections and the focus.
        focus_before = focused(driver)
        driver.refresh()
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#queue .item"))
        # The browser may deliver the last writes of the page before the
        # reload a moment later (as storage events): wait for them.
        settled(driver, str(len(expected)), check)
        try:
            WebDriverWait(driver, 5).until(lambda d: focused(d) == focus_before)
        except TimeoutException:
            check(False, f"focus after reload {focused(driver)} (was {focus_before})")
        for item_id, quote in QUOTES.items():
            if item_id in expected:
                mark = card(driver, item_id).find_element(By.CSS_SELECTOR, ".rtext mark.mine").text
                check(mark == quote, f"{item_id}: the quote after reload is {mark!r}")
    finally:
        driver.quit()

    lines = [json.loads(l) for l in exported.splitlines() if l.strip()]
    by = {l["item_id"]: l for l in lines}
    check(set(by) == set(expected), f"exported {sorted(by)}, expected {sorted(expected)}")
    check(undone not in by, f"the undone decision on {undone} was exported")
    records = {json.loads(l)["id"]: json.loads(l)["text"] for l in open(os.path.join(data, "records.jsonl"))}
    for item_id, want in expected.items():
        line = by[item_id]
        for key in ("decision", "label", "target_node", "note"):
            check(line[key] == want[key], f"{item_id}: {key} {line[key]!r}, expected {want[key]!r}")
        for key in ("affect", "intensity", "bulk", "quote_start", "quote_end"):
            # only the fields the curator set are on the line
            check(line.get(key) == want.get(key), f"{item_id}: {key} {line.get(key)!r}, expected {want.get(key)!r}")
        check(line["curator"] == "kim" and line["run_id"] == run_id, f"bad line {line}")
        if "quote_start" in want:
            text = records[item_id.split("#")[0]].encode("utf-8")
            got = text[line["quote_start"]:line["quote_end"]].decode("utf-8")
            check(got == QUOTES[item_id], f"{item_id}: the bytes of the quote read {got!r}")
    check(sum(1 for l in lines if l.get("bulk")) == bulk_n, "bulk lines")
    path = os.path.join(downloads, "decisions.jsonl")
    for _ in range(50):
        if os.path.exists(path):
            break
        time.sleep(0.1)
    check(os.path.exists(path) and open(path).read() == exported, "the download differs from the page's text")

    out = subprocess.run([tomlite, "curate", "apply", path, "--staging", staging], capture_output=True, text=True)
    check(out.returncode == 0, f"curate apply failed: {out.stdout}{out.stderr}")
    check(f"{len(expected)} new" in out.stdout, out.stdout)
    table = pq.read_table(os.path.join(staging, "curated", "curated.parquet")).to_pylist()
    rows = {r["item_id"]: r for r in table}
    check(set(rows) == set(expected), f"curated rows {sorted(rows)}")
    for item_id, want in expected.items():
        r = rows[item_id]
        got = {"decision": r["decision"], "label": r["label"], "target_node": r["target_node"],
               "decided_affect": r["decided_affect"], "decided_intensity": r["decided_intensity"],
               "bulk": bool(r["bulk"])}
        exp = {"decision": want["decision"], "label": want["label"], "target_node": want["target_node"],
               "decided_affect": want.get("affect"), "decided_intensity": want.get("intensity"),
               "bulk": bool(want.get("bulk"))}
        check(got == exp, f"curated.parquet {item_id}: {got}, expected {exp}")
    status = json.loads(subprocess.run([tomlite, "curate", "status", "--staging", staging, "--json"],
                                       capture_output=True, text=True, check=True).stdout)
    check(status["applied"] == len(expected) and status["pending"] == 28 - len(expected), f"status {status}")
    next_night(tomlite, staging, data, status["agreement"], len(expected), check)
    shots = os.environ.get("REPORT_SCREENSHOTS")
    if shots:
        os.makedirs(shots, exist_ok=True)
        shutil.copy(os.path.join(tmp, "keys.png"), shots)
    print(f"keyboard session: ok ({len(expected) - bulk_n} decisions by key, {bulk_n} in bulk, "
          f"quotes at byte offsets checked; screenshot {tmp}/keys.png)")


def next_night(tomlite, staging, data, agreement, applied, check):
    """The next night's report.md and report.html show `curate status`'s agreement figures."""
    first = open(os.path.join(staging, "LATEST")).read().strip()
    subprocess.run(
        [tomlite, "run", "--input", f"{data}/records.jsonl", "--nodes", f"{data}/nodes.jsonl",
         "--annotations", f"{data}/annotations.jsonl", "--staging", staging],
        check=True, stdout=subprocess.DEVNULL)
    run_id = open(os.path.join(staging, "LATEST")).read().strip()
    check(run_id != first, "no next run")
    run_dir = os.path.join(staging, "runs", run_id)
    md = open(os.path.join(run_dir, "report.md")).read()
    check("## Curator agreement" in md and f"over the {applied} applied decisions" in md, md)
    cell = lambda b: f"{b['agreed']}/{b['decided']}" if b["decided"] else "–"
    check(set(agreement) == {"tom_kind", "affect", "intensity", "edges"}, f"heads {sorted(agreement)}")
    decided = 0
    for head, a in agreement.items():
        row = f"| {head} | {a['threshold']:.2f} | " + " | ".join(cell(b) for b in a["bins"]) + f" | {cell(a['bulk'])} |"
        check(row in md, f"report.md lacks {row!r}:\n{md}")
        decided += sum(b["decided"] for b in a["bins"]) + a["bulk"]["decided"]
        holds = {True: "holds", False: "does NOT hold", None: "no one-by-one decision"}[a["threshold_holds"]]
        check(f"- {head} (threshold {a['threshold']:.2f}): {holds}" in md, f"report.md lacks the verdict of {head}")
    check(decided > 0, "no decision counted in the agreement")
    opts = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu"]:
        opts.add_argument(a)
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")))
    try:
        driver.get("file://" + os.path.join(run_dir, "report.html"))
        WebDriverWait(driver, 20).until(lambda d: d.execute_script("return window.__tomliteReady !== undefined"))
        check(not driver.find_element(By.ID, "errors").text.strip(), "page errors")
        check(driver.find_element(By.ID, "agreement").is_displayed(), "no agreement section")
        for head, a in agreement.items():
            cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, f'#agreement-table tr[data-head="{head}"] td')]
            want = [head, f"{a['threshold']:.2f}"] + [cell(b) for b in a["bins"]] + [cell(a["bulk"])]
            check(cells[:len(want)] == want, f"agreement row {cells}, expected {want}")
    finally:
        driver.quit()


def settled(driver, count, check):
    """Waits (up to 5 s) until the page counts `count` decisions."""
    try:
        WebDriverWait(driver, 5).until(lambda d: d.find_element(By.ID, "decided-count").text == count)
    except TimeoutException:
        check(False, f"decisions lost on reload: {driver.find_element(By.ID, 'decided-count').text} decided, not {count}")


def card(driver, item_id):
    return driver.find_element(By.CSS_SELECTOR, f'#queue .item[data-item-id="{item_id}"]')


def focused(driver):
    cards = driver.find_elements(By.CSS_SELECTOR, "#queue .item.focus")
    return cards[0].get_attribute("data-item-id") if len(cards) == 1 else None


def press(driver, keys):
    ActionChains(driver).send_keys(keys).perform()


def drive(driver, run_dir, check):
    """The session: returns the expected decision per item, the bulk count and the undone item."""
    driver.get("file://" + os.path.join(run_dir, "report.html"))
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#queue .item"))
    check(not driver.find_element(By.ID, "errors").text.strip(), "page errors")
    D = driver.execute_script("return JSON.parse(document.getElementById('tomlite-data').textContent)")
    vocab, nodes = D["vocab"], {n[0] for n in D["nodes"]}
    items = {it["item_id"]: it for it in D["queue"]}
    th = D["thresholds"]

    # Sort orders by value (a menu, outside the keyed session).
    def order():
        return [c.get_attribute("data-item-id") for c in driver.find_elements(By.CSS_SELECTOR, "#queue .item")]
    conf = [it for it in D["queue"] if it.get("confidence") is not None]
    rest = [it["item_id"] for it in D["queue"] if it.get("confidence") is None]
    Select(driver.find_element(By.ID, "sort")).select_by_value("likely")
    want = [it["item_id"] for it in sorted(conf, key=lambda it: -it["confidence"])] + rest
    check(order() == want, f"most likely right first: {order()}")
    Select(driver.find_element(By.ID, "sort")).select_by_value("threshold")
    head = lambda it: th["edge"] if it["item_type"] == "edge" else th["tom_kind"]
    want = [it["item_id"] for it in sorted(conf, key=lambda it: abs(it["confidence"] - head(it)))] + rest
    check(order() == want, f"closest to its threshold first: {order()}")
    Select(driver.find_element(By.ID, "sort")).select_by_value("reason")

    name = driver.find_element(By.ID, "curator")
    name.send_keys("kim")
    name.send_keys(Keys.ESCAPE)
    check(driver.switch_to.active_element.get_attribute("id") != "curator", "Esc leaves the name box")

    # The help overlay.
    press(driver, "?")
    check(driver.find_element(By.ID, "keyhelp").is_displayed(), "? shows the keys")
    press(driver, "a")
    check(driver.find_element(By.ID, "decided-count").text == "0", "a key acted behind the help")
    press(driver, Keys.ESCAPE)
    check(not driver.find_element(By.ID, "keyhelp").is_displayed(), "Esc closes the help")

    shown = order()
    check(focused(driver) == shown[0], f"the first card is not focused: {focused(driver)}")
    expected, decided, tags = {}, 0, 0
    skip = "j-014#edge1"   # decided last, then undone
    while decided < 20:
        item_id = focused(driver)
        check(item_id is not None, "no focused card")
        visible = driver.execute_script(
            "var r = arguments[0].getBoundingClientRect(), b = document.querySelector('#queue .filterbar').getBoundingClientRect();"
            "return r.top >= b.bottom - 1 && r.top < window.innerHeight;", card(driver, item_id))
        check(visible, f"the focused card {item_id} is not in view")
        it = items[item_id]
        if item_id == skip:
            press(driver, "j")
            continue
        line = {"label": it["label"], "target_node": it["target_node"]}
        keys = ""
        if it["item_type"] == "annotation":
            keys = "2a"
            line.update(decision="relabel", label="belief")
        elif it["item_type"] == "edge":
            if it["target_node"] not in nodes:
                # the target by keys: t, type, Enter
                press(driver, "t")
                press(driver, "person:priya" + Keys.ENTER)
                line.update(decision="relabel", target_node="person:priya")
            elif it["label"] in vocab["tom_kind"] and decided % 2:
                keys = "a"
                line.update(decision="accept")
            else:
                rel = "relationship" if it["label"] != "relationship" else "goal"
                keys = str(vocab["tom_kind"].index(rel) + 1) + "a"
                line.update(decision="relabel", label=rel)
        else:
            tags += 1
            if tags == 3:
                keys = "r"
                line.update(decision="reject")
            else:
                free = it["label"] not in vocab["tom_kind"]
                kind = None
                if free:
                    kind = it.get("suggested_label") or "emotion"
                elif tags % 2 == 0:
                    kind = vocab["tom_kind"][(vocab["tom_kind"].index(it["label"]) + 1) % 8]
                if kind:
                    keys += str(vocab["tom_kind"].index(kind) + 1)
                    line.update(decision="relabel", label=kind)
                else:
                    line.update(decision="accept")
                aff = next(a for a in vocab["affect"][tags % 6:] + vocab["affect"] if a != it["affect"])
                inten = next(v for v in vocab["intensity"][tags % 4:] + vocab["intensity"] if v != it["intensity"])
                keys += AFFECT_KEYS[vocab["affect"].index(aff)] + INTENSITY_KEYS[vocab["intensity"].index(inten)]
                line.update(affect=aff, intensity=inten)
                if item_id in QUOTES:
                    # corrections re-draw the card: make them before selecting
                    press(driver, keys)
                    keys = ""
                    text = D["texts"][it["text"]]
                    i = text.index(QUOTES[item_id])
                    got = driver.execute_script(SELECT_JS, item_id, u16(text, i), u16(text, i + len(QUOTES[item_id])))
                    check(got == QUOTES[item_id], f"selected {got!r}")
                    keys += "q"
                    start = len(text[:i].encode("utf-8"))
                    line.update(quote_start=start, quote_end=start + len(QUOTES[item_id].encode("utf-8")))
                if tags == 4:
                    # keys typed into the note are text, not commands
                    press(driver, "m")
                    press(driver, "checked by keys" + Keys.ESCAPE)
                    check(focused(driver) == item_id and driver.find_element(By.ID, "decided-count").text == str(decided),
                          "keys typed into a note acted on the queue")
                    line["note"] = "checked by keys"
                keys += "a"
        if keys:
            press(driver, keys)
        check(card(driver, item_id).get_attribute("data-decision") == line["decision"],
              f"{item_id} shows {card(driver, item_id).get_attribute('data-decision')!r} after {keys!r}: "
              f"{card(driver, item_id).find_element(By.CSS_SELECTOR, '.cardmsg').text}")
        if "quote_start" in line:
            mark = card(driver, item_id).find_element(By.CSS_SELECTOR, ".rtext mark.mine").text
            check(mark == QUOTES[item_id], f"the card marks {mark!r}")
        expected[item_id] = line
        decided += 1
        check(driver.find_element(By.ID, "decided-count").text == str(decided), "decided count")
        check(driver.find_element(By.ID, "left-count").text == str(28 - decided), "left count")
    check(all(k in expected for k in QUOTES), "the quoted records were not reached")
    rate = driver.find_element(By.ID, "rate").text
    check(float(rate) > 0, f"rate {rate!r}")

    # Decide the skipped edge, then take it back with u.
    while focused(driver) != skip:
        at, want_at = shown.index(focused(driver)), shown.index(skip)
        press(driver, "j" if want_at > at else "k")
    press(driver, "r")
    check(card(driver, skip).get_attribute("data-decision") == "reject", "reject the skipped edge")
    check(driver.find_element(By.ID, "decided-count").text == "21", "21 decided")
    press(driver, "u")
    check(card(driver, skip).get_attribute("data-decision") is None, "u did not undo")
    check(driver.find_element(By.ID, "decided-count").text == "20", "20 decided after u")

    # Bulk accept what is left and can be accepted as it stands.
    acceptable = [i for i in shown if i not in expected and
                  (items[i]["label"] in vocab["tom_kind"]) and
                  (items[i]["item_type"] != "edge" or items[i]["target_node"] in nodes)]
    n = len(acceptable)
    check(n > 0 and driver.find_element(By.ID, "bulk-accept").text == f"Accept all {n} shown",
          f"bulk button says {driver.find_element(By.ID, 'bulk-accept').text!r}, expected {n}")
    press(driver, "A")
    alert = driver.switch_to.alert
    check(f"Accept all {n} items shown" in alert.text, f"dialog {alert.text!r}")
    alert.dismiss()
    check(driver.find_element(By.ID, "decided-count").text == "20", "a dismissed bulk decided")
    press(driver, "A")
    driver.switch_to.alert.accept()
    try:
        driver.switch_to.alert
        check(False, "a second dialog")
    except NoAlertPresentException:
        pass
    check(driver.find_element(By.ID, "decided-count").text == str(20 + n), "bulk count")
    for i in acceptable:
        expected[i] = {"decision": "accept", "label": items[i]["label"], "target_node": items[i]["target_node"], "bulk": True}
    press(driver, "e")
    check(driver.find_element(By.ID, "export-msg").text == f"Exported {20 + n} decisions to decisions.jsonl.",
          driver.find_element(By.ID, "export-msg").text)
    for item_id, line in expected.items():
        line.setdefault("note", "")
    return expected, n, skip
