#!/usr/bin/python3
"""Extract, clean and split Jane Austen's six novels from Debian's
r-cran-janeaustenr package (MIT; the novels are public domain).

Writes <work>/train.txt and <work>/val.txt: one paragraph per line, UTF-8.
Every 20th paragraph (index % 20 == 19, counted over all books in a fixed
order) is held out for validation, so the split is deterministic.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

import rdata

# Fixed book order: the split depends on it.
BOOKS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma",
         "northangerabbey", "persuasion"]
HOLD_OUT_EVERY = 20


def fetch_package(work):
    """apt-get download + dpkg-deb -x: gets the data without installing R."""
    deb_dir = os.path.join(work, "deb")
    os.makedirs(deb_dir, exist_ok=True)
    debs = glob.glob(os.path.join(deb_dir, "r-cran-janeaustenr_*.deb"))
    if not debs:
        subprocess.run(["apt-get", "download", "r-cran-janeaustenr"],
                       cwd=deb_dir, check=True)
        debs = glob.glob(os.path.join(deb_dir, "r-cran-janeaustenr_*.deb"))
    if len(debs) != 1:
        sys.exit("expected one r-cran-janeaustenr .deb in %s, found %d"
                 % (deb_dir, len(debs)))
    root = os.path.join(work, "pkg")
    subprocess.run(["dpkg-deb", "-x", debs[0], root], check=True)
    data = os.path.join(root, "usr/lib/R/site-library/janeaustenr/data")
    return os.path.join(data, "Rdata.rdx"), os.path.join(data, "Rdata.rdb")


def paragraphs(lines):
    """Join the book's wrapped lines into paragraphs (blank line = break)."""
    out, cur = [], []
    for line in list(lines) + [""]:
        line = (line or "").strip()
        if line:
            cur.append(line)
        elif cur:
            out.append(clean(" ".join(cur)))
            cur = []
    return [p for p in out if p]


def clean(text):
    # Project Gutenberg marks italics with underscores; they are not prose.
    text = text.replace("_", "")
    return re.sub(r"\s+", " ", text).strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", required=True, help="working directory")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rdx, rdb = fetch_package(args.work)
    db = rdata.load_lazy_db(rdx, rdb)
    missing = [b for b in BOOKS if b not in db]
    if missing:
        sys.exit("%s: books missing from the R data: %s" % (rdb, missing))
    train, val = [], []
    n = 0
    for book in BOOKS:
        for p in paragraphs(db[book]):
            (val if n % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1 else train).append(p)
            n += 1
    for name, paras in (("train.txt", train), ("val.txt", val)):
        with open(os.path.join(args.work, name), "w", encoding="utf-8") as f:
            for p in paras:
                f.write(p + "\n")
    chars = sum(len(p) for p in train + val)
    print("corpus: %d paragraphs (%d train, %d val), %d characters"
          % (n, len(train), len(val), chars))


if __name__ == "__main__":
    main()
