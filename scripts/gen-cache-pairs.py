#!/usr/bin/env python3
"""Generate tests/data/cache-pairs.jsonl, the cache's evaluation set (issue 14, item 7).

Each line is one labelled prompt pair:
  {"a": str, "b": str, "label": bool, "kind": str, "tools_a": [str], "tools_b": [str]}
`label` is true when the answer to `a` may be served for `b` (a true variant), false
for a hard negative. `tools_*` (optional) are the tool names declared with the
request; the gateway hashes tools sorted into the key's scope, so a reordered tool
list changes nothing there, and the eval test builds scopes the same way. Those
pairs also vary the text (whitespace, case, punctuation).

True variants: whitespace, punctuation, case, a synonym from src/cache/synonyms.txt,
filler words (politeness, greetings: the cache's FILLER list, at most 2), reordered
tool definitions, and mixes of these; also a typo and a rewording outside the synonym
list, which keep the answer but which the cache is built to refuse (so recall counts
what that strictness costs).
Hard negatives: a negation, a changed number, a changed date, a changed name, a swapped
comparison, another language (asked for, or the prompt written in it), one added
constraint; also these on long prompts (one word changed in ~2,000 characters) and
with harmless noise on top.

Deterministic: `python3 scripts/gen-cache-pairs.py` (seed 14) writes the same file.
"""

import json
import os
import random
import re

SEED = 14
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "cache-pairs.jsonl")
SYNONYMS = os.path.join(ROOT, "src", "cache", "synonyms.txt")
# Keep in step with FILLER in src/cache/verify.rs.
FILLER_PREFIX = ["Please ", "Hi, ", "Hello! ", "Hey, ", "Kindly ", "Hi, please "]
FILLER_SUFFIX = [" Thanks!", " please", " Thanks.", ", please."]

rng = random.Random(SEED)


def load_synonyms():
    groups = []
    with open(SYNONYMS) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            canon, rest = line.split(":", 1)
            groups.append([canon.strip()] + [w.strip() for w in rest.split(",") if w.strip()])
    return {w: g for g in groups for w in g}


SYN = load_synonyms()

COUNTRIES = ["France", "Japan", "Brazil", "Kenya", "Canada", "Norway", "Vietnam", "Peru",
             "Egypt", "Poland", "Chile", "India", "Spain", "Ghana", "Nepal", "Iceland"]
CITIES = ["Paris", "Tokyo", "Lagos", "Denver", "Lyon", "Osaka", "Madrid", "Berlin",
          "Quito", "Austin", "Oslo", "Seoul", "Lima", "Porto", "Accra", "Dublin"]
PEOPLE = ["Ada Lovelace", "Alan Turing", "Marie Curie", "Isaac Newton", "Grace Hopper",
          "Nikola Tesla", "Rosalind Franklin", "Charles Darwin", "Emmy Noether",
          "Leonhard Euler", "Katherine Johnson", "Niels Bohr", "Carl Gauss", "Hedy Lamarr"]
TOPICS = ["photosynthesis", "a hash table", "TCP congestion control", "the immune system",
          "compound interest", "a blockchain", "plate tectonics", "garbage collection",
          "a heat pump", "vaccination", "public key cryptography", "inflation",
          "a transformer model", "ocean tides", "the water cycle", "a B-tree", "DNS",
          "a bicycle gear", "a refrigerator", "supply and demand"]
LANGS_PROG = ["Python", "Rust", "Go", "JavaScript", "Java", "C", "Haskell", "Ruby"]
TASKS = ["reverses a string", "checks whether a number is prime", "merges two sorted lists",
         "counts the words in a file", "parses a CSV line", "computes a factorial",
         "finds the largest element of an array", "removes duplicates from a list",
         "validates an email address", "converts Celsius to Fahrenheit"]
FORMS = ["poem", "story", "limerick", "song", "letter", "speech", "essay", "dialogue"]
LANGS = ["French", "German", "Spanish", "Italian", "Portuguese", "Japanese", "Dutch", "Polish"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
THINGS = ["fruits that are high in fiber", "programming languages with garbage collection",
          "ways to save energy at home", "famous bridges", "board games for two players",
          "sorting algorithms", "birds that cannot fly", "prime numbers", "rivers in Europe"]
SENTENCES = ["Where is the train station?", "I would like a cup of coffee.",
             "The meeting starts at noon.", "My brother lives in the city.",
             "Can you help me find my keys?", "It is raining again today."]
COMPARE = [("larger", "smaller"), ("heavier", "lighter"), ("older", "younger"),
           ("faster", "slower"), ("more", "less"), ("before", "after")]
CONSTRAINTS = [" in under 50 words", " briefly", " in Python", " as a haiku",
               " without using loops", " for a five-year-old", " in one sentence",
               " in the style of Shakespeare", " with examples", " in bullet points",
               " in detail", " step by step", " in Spanish", " using only emojis"]
FOREIGN = [
    ("What is the capital of France?", "Quelle est la capitale de la France ?"),
    ("What is the capital of Spain?", "¿Cuál es la capital de España?"),
    ("Explain how photosynthesis works.", "Erkläre, wie Photosynthese funktioniert."),
    ("Write a poem about the sea.", "Scrivi una poesia sul mare."),
    ("How many days are in a leap year?", "Combien de jours y a-t-il dans une année bissextile ?"),
    ("Tell me a joke about cats.", "Cuéntame un chiste sobre gatos."),
    ("What time is it in Tokyo?", "Wie spät ist es in Tokio?"),
    ("Summarize the history of Rome.", "Riassumi la storia di Roma."),
    ("List five fruits that are red.", "Liste cinq fruits qui sont rouges."),
    ("Translate this sentence into English.", "Traduce esta frase al inglés."),
    ("What is the boiling point of water?", "Qual é o ponto de ebulição da água?"),
    ("Give me a recipe for pancakes.", "Geef me een recept voor pannenkoeken."),
]
TOOLS = ["get_weather", "search_web", "calculator", "send_email", "read_calendar",
         "lookup_stock", "translate_text", "create_ticket"]
FILLER_TEXT = [
    "The committee met on a Tuesday to review the quarterly figures.",
    "Revenue in the northern region grew while costs stayed flat.",
    "Several members asked for a clearer breakdown of the marketing spend.",
    "The chair proposed moving the product launch to the following quarter.",
    "A vote on the new hiring plan was postponed pending legal review.",
    "Customer complaints about delivery times fell for the third month.",
    "The finance team flagged a currency risk in the southern contracts.",
    "An external auditor will visit the main office next spring.",
    "The board thanked the outgoing treasurer for her years of service.",
    "Minutes of the previous meeting were approved without changes.",
    "The warehouse upgrade finished two weeks ahead of schedule.",
    "Staff surveys show rising satisfaction with the flexible hours policy.",
]


def date():
    return f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(1950, 2024)}"


def long_doc():
    n = rng.randint(20, 34)
    body = " ".join(rng.choice(FILLER_TEXT) for _ in range(n))
    who = rng.choice(PEOPLE)
    return (f"Summarize the following minutes written by {who} on {date()} "
            f"for the {rng.randint(3, 40)} board members: {body}")


def base_prompts():
    """(text, facts) where facts tells which negatives apply."""
    out = []
    for _ in range(40):
        out.append(f"What is the capital of {rng.choice(COUNTRIES)}?")
        out.append(f"Explain how {rng.choice(TOPICS)} works.")
        out.append(f"Write a {rng.choice(FORMS)} about {rng.choice(TOPICS)}.")
        out.append(f"Create a {rng.choice(LANGS_PROG)} function that {rng.choice(TASKS)}.")
        out.append(f"List {rng.randint(3, 12)} {rng.choice(THINGS)}.")
        out.append(f"Tell me about the early life of {rng.choice(PEOPLE)}.")
        a, b = rng.sample(range(2, 999), 2)
        out.append(f"What is {a} times {b}?")
        x, y = rng.sample(CITIES, 2)
        w = rng.choice(COMPARE)[0]
        out.append(f"Is {x} {w} than {y} in population?" if w != "before" else
                   f"Did {rng.choice(PEOPLE)} live before {rng.choice(PEOPLE)}?")
        out.append(f"What happened in {rng.choice(CITIES)} on {date()}?")
        out.append(f"Translate \"{rng.choice(SENTENCES)}\" into {rng.choice(LANGS)}.")
        out.append(f"Give me an example of {rng.choice(TOPICS)} in daily life.")
        out.append(f"Summarize why {rng.choice(TOPICS)} matters for a {rng.choice(['student', 'doctor', 'farmer', 'pilot'])}.")
        out.append(f"Convert {rng.randint(2, 500)} miles to kilometers.")
        out.append(f"Fix this {rng.choice(LANGS_PROG)} code: for i in range({rng.randint(2, 50)}): print(i")
        out.append(f"Show me how to use {rng.choice(TOPICS)} to help a small business.")
        out.append(f"Why is {rng.choice(TOPICS)} not used more often?")
    for _ in range(60):
        out.append(long_doc())
    rng.shuffle(out)
    return out


# --- true variants ---------------------------------------------------------------

def v_whitespace(p):
    words = p.split(" ")
    seps = [rng.choice([" ", "  ", "\n", "\t", " \n ", "   "]) for _ in words[1:]]
    s = words[0] + "".join(sep + w for sep, w in zip(seps, words[1:]))
    return rng.choice(["", " ", "\n"]) + s + rng.choice(["", " ", "\n\n"])


def v_punct(p):
    s = p.rstrip(".?!")
    s = re.sub(r"^(\S+) ", lambda m: m.group(1) + ", " if rng.random() < 0.3 else m.group(0), s)
    return s + rng.choice(["", "?", "!", "...", "??", ".", " ?"])


def v_case(p):
    mode = rng.randint(0, 3)
    if mode == 0:
        return p.lower()
    if mode == 1:
        return p.upper()
    if mode == 2:
        return p.title()
    return " ".join(w.upper() if rng.random() < 0.3 else w for w in p.split(" "))


def v_synonym(p):
    words = p.split(" ")
    spots = [i for i, w in enumerate(words) if re.sub(r"\W+$", "", w).lower() in SYN]
    if not spots:
        return None
    i = rng.choice(spots)
    core = re.sub(r"\W+$", "", words[i])
    tail = words[i][len(core):]
    others = [g for g in SYN[core.lower()] if g != core.lower()]
    new = rng.choice(others)
    if core[0].isupper():
        new = new[0].upper() + new[1:]
    words[i] = new + tail
    return " ".join(words)


def v_filler(p):
    r = rng.random()
    first = p[0].lower() + p[1:] if not p.startswith(("I ", "DNS")) else p
    if r < 0.45:
        return rng.choice(FILLER_PREFIX) + first
    if r < 0.8:
        return p + rng.choice(FILLER_SUFFIX)
    return "Hi, " + first + " Thanks!"


def v_typo(p):
    """One pair of adjacent letters swapped inside a word of 6+ letters."""
    words = p.split(" ")
    spots = [i for i, w in enumerate(words) if w.isalpha() and len(w) >= 6]
    if not spots:
        return None
    i = rng.choice(spots)
    w = words[i]
    j = rng.randint(1, len(w) - 3)
    words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    return " ".join(words)


PARAPHRASES = [
    (r"^Explain how (.+) works\.$", r"How does \1 work?"),
    (r"^What is the capital of (\w+)\?$", r"Which city is the capital of \1?"),
    (r"^Write a (\w+) about (.+)\.$", r"Write a \1 on the subject of \2."),
    (r"^List (\d+) (.+)\.$", r"Give me a list of \1 \2."),
    (r"^Tell me about the early life of (.+)\.$", r"What was the early life of \1 like?"),
    (r"^What is (\d+) times (\d+)\?$", r"What is \1 multiplied by \2?"),
    (r"^Convert (\d+) miles to kilometers\.$", r"How many kilometers are \1 miles?"),
    (r"^What happened in (\w+) on (.+)\?$", r"What took place in \1 on \2?"),
]


def v_paraphrase(p):
    """A rewording outside the synonym list (the cache is expected to miss these)."""
    for pat, rep in PARAPHRASES:
        if re.match(pat, p):
            return re.sub(pat, rep, p)
    return None


POSITIVE = [("whitespace", v_whitespace), ("punctuation", v_punct), ("case", v_case),
            ("synonym", v_synonym), ("filler", v_filler)]


# --- hard negatives --------------------------------------------------------------

def n_negation(p):
    if " not " in p:
        return p.replace(" not ", " ", 1)
    for aux in ["is", "are", "can", "does", "should", "was", "did", "Is", "Did"]:
        m = re.search(rf"\b{aux}\b", p)
        if m:
            return p[:m.end()] + " not" + p[m.end():]
    return "Do not " + p[0].lower() + p[1:]


def n_number(p):
    nums = list(re.finditer(r"\d+", p))
    if not nums:
        return None
    m = rng.choice(nums)
    n = int(m.group(0))
    new = rng.choice([n + 1, n - 1 if n > 1 else n + 2, n * 10, n + 7])
    return p[:m.start()] + str(new) + p[m.end():]


def n_date(p):
    m = re.search(r"(" + "|".join(MONTHS) + r") (\d+), (\d{4})", p)
    if not m:
        return None
    month, day, year = m.group(1), int(m.group(2)), int(m.group(3))
    k = rng.randint(0, 2)
    if k == 0:
        month = rng.choice([x for x in MONTHS if x != month])
    elif k == 1:
        day = day + 1
    else:
        year = year - rng.randint(1, 30)
    return p[:m.start()] + f"{month} {day}, {year}" + p[m.end():]


def n_name(p):
    for pool in (PEOPLE, CITIES, COUNTRIES, TOPICS, LANGS_PROG, LANGS):
        hits = [x for x in pool if x in p]
        if hits:
            old = rng.choice(hits)
            return p.replace(old, rng.choice([x for x in pool if x != old]), 1)
    return None


def n_swap(p):
    m = re.match(r"Is (\w+) (\w+) than (\w+)(.*)", p)
    if m and rng.random() < 0.6:
        return f"Is {m.group(3)} {m.group(2)} than {m.group(1)}{m.group(4)}"
    for a, b in COMPARE:
        if re.search(rf"\b{a}\b", p):
            return re.sub(rf"\b{a}\b", b, p, count=1)
    m = re.match(r"What is (\d+) times (\d+)\?", p)
    if m:
        return f"What is {m.group(1)} divided by {m.group(2)}?"
    return None


def n_language(p):
    for lang in LANGS:
        if f"into {lang}" in p:
            return p.replace(f"into {lang}", "into " + rng.choice([x for x in LANGS if x != lang]))
    return None


def n_constraint(p):
    c = rng.choice(CONSTRAINTS)
    if p.endswith((".", "?", "!")):
        return p[:-1] + c + p[-1]
    return p + c


NEGATIVE = [("negation", n_negation), ("number", n_number), ("date", n_date),
            ("name", n_name), ("comparison", n_swap), ("language", n_language),
            ("constraint", n_constraint)]


def noise(p):
    """A harmless change on top of a negative, so it is not trivially different."""
    if "code:" in p:
        return rng.choice([v_whitespace, lambda s: s])(p)
    return rng.choice([v_whitespace, v_punct, v_case, lambda s: s])(p)


def main():
    pairs = []
    bases = base_prompts()
    for p in bases:
        # Two true variants and two hard negatives per base prompt where they apply.
        kinds = rng.sample(POSITIVE, 2)
        if rng.random() < 0.3:
            kinds = kinds[:1] + [("mixed", lambda s: v_case(v_whitespace(v_punct(s))))]
        for kind, f in kinds:
            if "code:" in p and kind in ("case", "mixed"):
                # Case matters in code; the cache folds it anyway (README: limits).
                kind, f = "whitespace", v_whitespace
            b = f(p)
            if b is None:
                kind, b = "whitespace", v_whitespace(p)
            pairs.append({"a": p, "b": b, "label": True, "kind": kind})
        applicable = [(k, f(p)) for k, f in NEGATIVE]
        applicable = [(k, b) for k, b in applicable if b is not None and b != p]
        for kind, b in rng.sample(applicable, min(2, len(applicable))):
            pairs.append({"a": p, "b": noise(b), "label": False, "kind": kind})
    # More of the rarer negatives: every base prompt with a date, a comparison or a
    # number gets one more of those.
    for p in bases:
        for kind, f in (("date", n_date), ("comparison", n_swap), ("number", n_number)):
            b = f(p)
            if b is not None and b != p and rng.random() < 0.7:
                pairs.append({"a": p, "b": noise(b), "label": False, "kind": kind})
    # Synonym variants of every base prompt that has a listed word.
    for p in bases:
        b = v_synonym(p)
        if b is not None and rng.random() < 0.5:
            pairs.append({"a": p, "b": v_case(b) if rng.random() < 0.3 else b, "label": True,
                          "kind": "synonym"})
    # Variants outside what the cache accepts (a typo, a rewording): same answer, but
    # verification refuses them, so they measure the recall it gives up.
    for p in rng.sample(bases, 200):
        for kind, f in (("typo", v_typo), ("paraphrase", v_paraphrase)):
            b = f(p)
            if b is not None and b != p and rng.random() < 0.6:
                pairs.append({"a": p, "b": b, "label": True, "kind": kind})
    # Reordered tool definitions with a text-side variant.
    for p in rng.sample(bases, 120):
        tools = rng.sample(TOOLS, rng.randint(2, 5))
        other = tools[:]
        while other == tools:
            rng.shuffle(other)
        vary = [v_whitespace, v_punct] if "code:" in p else [v_whitespace, v_case, v_punct]
        pairs.append({"a": p, "b": rng.choice(vary)(p),
                      "label": True, "kind": "tools", "tools_a": tools, "tools_b": other})
    # Prompts written in another language.
    for en, other in FOREIGN:
        for _ in range(4):
            pairs.append({"a": en, "b": noise(other), "label": False, "kind": "language"})
            pairs.append({"a": other, "b": noise(en), "label": False, "kind": "language"})
    rng.shuffle(pairs)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        for pr in pairs:
            f.write(json.dumps(pr, ensure_ascii=False) + "\n")
    pos = sum(p["label"] for p in pairs)
    print(f"{len(pairs)} pairs ({pos} true variants, {len(pairs) - pos} hard negatives) -> {OUT}")


if __name__ == "__main__":
    main()
