#!/usr/bin/env python3
"""The curator's report in a real browser (headless Chromium via selenium).

Runs the job on the bundled sample (its annotations file, so the queue is
known: 28 items), opens the run's report.html from disk, checks the counts
and that the queue renders, accepts one item, relabels a tag through its
menu and an edge through the node search box (one shared <datalist>,
filled as the curator types), exports decisions.jsonl, feeds it to `tomlite curate apply` and
checks what was curated; on a small run, a card names the rule that held
its record as sensitive (held_by_rule). Then, on a fresh run, a whole session by keys
alone (keyboard_session): corrections of kind, affect, intensity and quote,
an edge's relation and target, a bulk accept, an undo, the sort orders,
export, `curate apply`, and curated.parquet read back. Saves screenshots in
the test's temp dir (and in $REPORT_SCREENSHOTS when set).

Usage: tests/browser/report_test.py PATH/TO/tomlite
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from keyboard_session import keyboard_session, settled

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


AUDIT = "Accountant rang: we're facing a tax audit over the market stall's unreported cash sales."
CHEMO = "Chemo starts on the 4th, so I asked Sam to keep answers short."
HOSTILE = "rules:x</script><img src=x onerror=alert(1)>\u202e"


def held_by_rule(driver, tomlite, tmp):
    """A card names the rule that held its record as sensitive, beside its
    reasons; a detector written by another annotator shows as text."""
    work = os.path.join(tmp, "rules")
    os.makedirs(work)

    def record(rid, text):
        return {"id": rid, "persona_id": "ada", "kind": "journal", "source_path": f"journals/{rid}.md",
                "created_at": "2026-11-28T21:00:00Z", "text": text}

    def annotation(rid, text, quote):
        s = text.index(quote)
        return {"record_id": rid, "annotator": "test@1", "edges": [],
                "tags": [{"tom_kind": "preference", "confidence": 0.97, "source_quote": quote,
                          "quote_start": s, "quote_end": s + len(quote.encode())}],
                "affect": {"label": "neutral", "confidence": 0.95},
                "intensity": {"label": "medium", "confidence": 0.95}}

    chemo = annotation("h-chemo", CHEMO, "keep answers short")
    quote = "Chemo starts on the 4th"
    chemo["sensitive"] = {"category": "health", "confidence": 0.9, "quote": quote, "quote_start": 0,
                          "quote_end": len(quote), "detector": HOSTILE}
    for name, rows in [("records.jsonl", [record("t-audit", AUDIT), record("h-chemo", CHEMO)]),
                       ("annotations.jsonl", [annotation("t-audit", AUDIT, AUDIT), chemo])]:
        with open(os.path.join(work, name), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
    staging = os.path.join(work, "staging")
    subprocess.run([tomlite, "run", "--input", os.path.join(work, "records.jsonl"), "--annotations",
                    os.path.join(work, "annotations.jsonl"), "--staging", staging],
                   check=True, stdout=subprocess.DEVNULL)
    run_id = open(os.path.join(staging, "LATEST")).read().strip()
    driver.get("file://" + os.path.join(staging, "runs", run_id, "report.html"))
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#queue .item"))
    check(not driver.find_element(By.ID, "errors").text.strip(), "page errors")
    audit = driver.find_element(By.CSS_SELECTOR, '#queue .item[data-item-id="t-audit#tag0"] .chips .heldby')
    check(audit.is_displayed(), "the rule is not shown")
    check(audit.text == "held by rule financial.tax_audit (finances_debt)", f"card says {audit.text!r}")
    card = driver.find_element(By.CSS_SELECTOR, '#queue .item[data-item-id="h-chemo#tag0"]')
    shown = card.find_element(By.CSS_SELECTOR, ".chips .heldby b").text
    check(shown == "x</script><img src=x onerror=alert(1)>\\u{202e}", f"hostile detector shows as {shown!r}")
    check(not card.find_elements(By.CSS_SELECTOR, "img"), "the detector became markup")
    # The detail line names the detector too: inert, so U+202E cannot turn
    # the rest of the line around.
    detail = card.find_element(By.CSS_SELECTOR, ".detail").text
    check("\u202e" not in card.text, f"a raw U+202E on the card: {detail!r}")
    check("x</script><img src=x onerror=alert(1)>\\u{202e}" in detail, f"detail says {detail!r}")


def main():
    tomlite = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="tomlite-browser-")
    staging = os.path.join(tmp, "staging")
    data = os.path.join(ROOT, "data", "sample")
    subprocess.run(
        [tomlite, "run", "--input", f"{data}/records.jsonl", "--nodes", f"{data}/nodes.jsonl",
         "--annotations", f"{data}/annotations.jsonl", "--staging", staging],
        check=True, stdout=subprocess.DEVNULL)
    run_id = open(os.path.join(staging, "LATEST")).read().strip()
    run_dir = os.path.join(staging, "runs", run_id)
    receipt = json.load(open(os.path.join(run_dir, "receipt.json")))
    c = receipt["counts"]
    queued = c["quarantined_tags"] + c["quarantined_edges"] + c["quarantined_annotations"]
    check(queued == 28, f"sample queue is {queued}")

    downloads = os.path.join(tmp, "downloads")
    os.makedirs(downloads)
    opts = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,2200"]:
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {"download.default_directory": downloads,
                                           "download.prompt_for_download": False})
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=opts, service=service)
    try:
        started = time.time()
        driver.get("file://" + os.path.join(run_dir, "report.html"))
        wait = WebDriverWait(driver, 20)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#queue .item"))
        load_s = time.time() - started
        errors = driver.find_element(By.ID, "errors").text.strip()
        check(not errors, f"page errors: {errors}")
        count = driver.find_element(By.ID, "queue-count").text.strip()
        check(count == "28", f"queue-count says {count!r}")
        summary = driver.find_element(By.ID, "summary").text
        check("28" in summary, "summary does not say how many items are queued")
        items = driver.find_elements(By.CSS_SELECTOR, "#queue .item")
        check(0 < len(items) <= 50, f"{len(items)} cards rendered")
        ids = [i.get_attribute("data-item-id") for i in items]
        check(len(set(ids)) == len(ids), "duplicate cards")
        # A quote is highlighted in its record's text.
        check(driver.find_elements(By.CSS_SELECTOR, "#queue .item mark"), "no highlighted quote")
        # Filter by reason: only the freeform items remain.
        Select(driver.find_element(By.ID, "filter-reason")).select_by_value("freeform_tom_label")
        n_free = int(driver.find_element(By.ID, "queue-count").text)
        check(n_free == 5, f"freeform_tom_label filter shows {n_free}")
        Select(driver.find_element(By.ID, "filter-reason")).select_by_value("")
        # Safety records come first (the sample's s-007 is flagged `safety`),
        # and the sensitive filter keeps only that record's items.
        first = driver.find_element(By.CSS_SELECTOR, "main > section:not([hidden])")
        check(first.get_attribute("id") == "safety", f"first section is {first.get_attribute('id')!r}")
        check("s-007" in first.text, "the safety section does not list s-007")
        Select(driver.find_element(By.ID, "filter-sensitive")).select_by_value("flag:safety")
        ids = [i.get_attribute("data-item-id") for i in driver.find_elements(By.CSS_SELECTOR, "#queue .item")]
        check(ids and all(i.startswith("s-007#") for i in ids), f"sensitive filter shows {ids}")
        Select(driver.find_element(By.ID, "filter-sensitive")).select_by_value("")

        driver.find_element(By.ID, "curator").send_keys("rosa")

        def click(el):
            # The filter bar is sticky: bring the button to the middle first.
            driver.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", el)
            el.click()

        def card(item_id):
            return driver.find_element(By.CSS_SELECTOR, f'#queue .item[data-item-id="{item_id}"]')

        # Accept one tag, relabel a free-form one to a vocabulary label.
        Select(driver.find_element(By.ID, "filter-type")).select_by_value("tag")
        click(card("s-009#tag0").find_element(By.CSS_SELECTOR, "button.accept"))
        Select(driver.find_element(By.ID, "filter-reason")).select_by_value("freeform_tom_label")
        c2 = card("j-009#tag0")
        sel = c2.find_element(By.CSS_SELECTOR, "select.relabel-to")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", sel)
        Select(sel).select_by_value("emotion")
        click(c2.find_element(By.CSS_SELECTOR, "button.relabel"))
        Select(driver.find_element(By.ID, "filter-reason")).select_by_value("")
        # Relabel an edge to a registry node: the card has a search box, not
        # a menu of every node; typing fills the one shared suggestion list.
        Select(driver.find_element(By.ID, "filter-type")).select_by_value("edge")
        check(not driver.find_elements(By.CSS_SELECTOR, "#queue .item select.relabel-to option[value='person:priya']"),
              "an edge card still lists the registry in a menu")
        check(len(driver.find_elements(By.CSS_SELECTOR, "datalist")) == 1, "one shared datalist")
        c3 = card("j-008#edge0")
        box = c3.find_element(By.CSS_SELECTOR, "input.relabel-to")
        check(box.get_attribute("list") == "node-list", "the search box uses #node-list")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", box)
        box.send_keys("priya")
        found = [o.get_attribute("value") for o in driver.find_elements(By.CSS_SELECTOR, "#node-list option")]
        check(found == ["person:priya"], f"suggestions for 'priya': {found}")
        # A value that is no node is refused on the card.
        box.clear()
        box.send_keys("person:nobody")
        click(c3.find_element(By.CSS_SELECTOR, "button.relabel"))
        msg = c3.find_element(By.CSS_SELECTOR, ".cardmsg").text
        check("not a node of the registry" in msg, f"card message {msg!r}")
        box.clear()
        box.send_keys("person:priya")
        click(c3.find_element(By.CSS_SELECTOR, "button.relabel"))
        Select(driver.find_element(By.ID, "filter-type")).select_by_value("")
        decided = driver.find_element(By.ID, "decided-count").text.strip()
        check(decided == "3", f"decided-count says {decided!r}")
        check(card("s-009#tag0").get_attribute("data-decision") == "accept", "accept not shown")

        click(driver.find_element(By.ID, "export"))
        exported = driver.find_element(By.ID, "export-text").get_attribute("value")
        driver.save_screenshot(os.path.join(tmp, "report.png"))
        lines = [json.loads(l) for l in exported.splitlines() if l.strip()]
        check(len(lines) == 3, f"exported {len(lines)} decisions")
        by = {l["item_id"]: l for l in lines}
        check(by["s-009#tag0"]["decision"] == "accept", "accept line")
        check(by["j-009#tag0"]["decision"] == "relabel" and by["j-009#tag0"]["label"] == "emotion",
              "relabel line")
        check(by["j-008#edge0"]["decision"] == "relabel" and by["j-008#edge0"]["target_node"] == "person:priya",
              f"edge relabel line {by.get('j-008#edge0')}")
        for l in lines:
            check(l["run_id"] == run_id and l["curator"] == "rosa" and l["decided_at"], f"bad line {l}")
            check(set(l) >= {"item_id", "decision", "label", "target_node", "curator", "note",
                             "decided_at"}, f"missing keys in {l}")
        # The download is the same file.
        path = os.path.join(downloads, "decisions.jsonl")
        for _ in range(50):
            if os.path.exists(path):
                break
            time.sleep(0.1)
        check(os.path.exists(path), "decisions.jsonl was not downloaded")
        check(open(path).read().strip() == exported.strip(), "download differs from the page's text")
        # A reload keeps the decisions (the browser holds them while the curator works).
        driver.refresh()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#queue .item"))
        settled(driver, "3", check)
        held_by_rule(driver, tomlite, tmp)
    finally:
        driver.quit()

    out = subprocess.run([tomlite, "curate", "apply", path, "--staging", staging],
                         capture_output=True, text=True)
    check(out.returncode == 0, f"curate apply failed: {out.stdout}{out.stderr}")
    check("3 new" in out.stdout, out.stdout)
    status = json.loads(subprocess.run([tomlite, "curate", "status", "--staging", staging, "--json"],
                                       capture_output=True, text=True, check=True).stdout)
    check(status["applied"] == 3 and status["pending"] == 25, f"status {status}")
    shots = os.environ.get("REPORT_SCREENSHOTS")
    if shots:
        os.makedirs(shots, exist_ok=True)
        shutil.copy(os.path.join(tmp, "report.png"), shots)
    print(f"browser test: ok (report loaded in {load_s:.2f}s; screenshot {tmp}/report.png)")
    keyboard_session(tomlite, ROOT, check)


if __name__ == "__main__":
    main()
