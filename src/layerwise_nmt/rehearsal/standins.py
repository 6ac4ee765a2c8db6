"""Stand-in inputs for the rehearsal: every raw file a task reads, in its real format and packaging, small.

For each file the tasks of the config read, in this order:
- the data mirror has it (itself, its `mirror` copy, or its archive): a symlink to the real file, checksum and all;
- the file is licensed user data (NIST): a stand-in directory laid out as `user_path` expects;
- otherwise it is written here in the release's format (plain, TED `train.tags`, IWSLT XML, WMT SGML where the
  release has .sgm, NIST SGML with 4 references) and packed the way the release packs it: single-file .gz, archives
  inside archives (IWSLT's per-pair .tgz inside the campaign .tgz, giga-fren's .gz inside a .tar), and .tgz/.tar/.zip
  archives holding every member of the release's real listing (release_listings.yaml, beside this file), not the
  config's paths: a `path:` the real release does not have fails here as it would on the real archive. A wildcard
  path's text is spread over the real files it matches (CWMT's Book1…Book20_cn.txt), the last of them without a
  final newline, as some real files end; members no task reads hold one placeholder line.

Text comes from the mirror where it exists for the language pair (Multi30k De-En, WMT16 newsdev En-Ro, Luong's
tokenized newstest2013 En-De); French, Spanish and Chinese sides are synthetic and look it ("fr" reverses each
English word, "es" reverses it and marks it, "zh" maps each English word to two fixed CJK characters), so no
stand-in can pass for real data. `STANDINS.md` in the output lists every file and where its text came from.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import zipfile
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

import yaml

from .. import UserError
from .. import grid

LISTINGS = files(__package__) / "release_listings.yaml"  # package data: an installed package rehearses too
# The data mirror's files the stand-ins' real text comes from (every other side is synthetic), each with {lang}
LUONG_TEXT = "wmt14-en-de/newstest2013.{lang}.gz"
ENRO_TEXT = "wmt16-en-ro/newsdev2016-enro.{lang}"
MULTI30K_TEXT = "multi30k/train.{lang}.gz"
TEXT_FILES = [
    pattern.format(lang=lang)
    for pattern, langs in ((MULTI30K_TEXT, ("de", "en")), (ENRO_TEXT, ("en", "ro")), (LUONG_TEXT, ("en", "de")))
    for lang in langs
]
PLACEHOLDER = b"stand-in: a member of the real release that no task reads\n"
TRAIN_LINES = 320  # per training split, shared among its parts (≥ 2 updates of update_freq 128 sentences)
EVAL_LINES = 12  # per evaluation split, shared among its parts
CJK = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种"
    "面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本"
    "去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比"
    "或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总"
    "次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做"
    "必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权"
    "收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信"
    "马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连"
    "断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存"
    "候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严龙飞"
)


@dataclass
class Needed:
    """One raw file some task reads: its dataset, name, format, language and the part it belongs to."""

    dataset: str
    name: str
    fmt: str
    lang: str
    part: tuple[str, str]  # (task, part template): both sides of a part share their lines
    langs: tuple[str, str]
    lines: int
    role: str  # train | eval


@dataclass
class Manifest:
    """What was written: per (dataset, archive or file name) the digests of the stand-in, and a provenance line
    per file for STANDINS.md."""

    digests: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    provenance: list[str] = field(default_factory=list)
    user_paths: dict[str, str] = field(default_factory=dict)


def needed_files(config: dict) -> list[Needed]:
    out, seen = [], set()
    for task_name, task in config["tasks"].items():
        langs = (task["src"], task["tgt"])
        for split_name, split in task["splits"].items():
            parts = split.get("parts", [])
            role = "train" if split_name == "train" else "eval"
            per_part = max(4, (TRAIN_LINES if role == "train" else EVAL_LINES) // max(1, len(parts)))
            for template in parts:
                for lang in langs:
                    name = template.format(lang=lang)
                    if (task["dataset"], name) in seen:
                        continue
                    seen.add((task["dataset"], name))
                    out.append(
                        Needed(
                            task["dataset"],
                            name,
                            grid.tasks.split_format(split),
                            lang,
                            (task_name, template),
                            langs,
                            per_part,
                            role,
                        )
                    )
    return out


def digests(data: bytes) -> dict[str, str]:
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "md5": hashlib.md5(data).hexdigest(),
        "git_blob": hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest(),
    }


# ---------------------------------------------------------------------------------------------------------------
# Text


class TextPool:
    """Sentence pairs for a language pair, handed out in fresh slices so that no two stand-in parts repeat."""

    def __init__(self, mirror: Path):
        self.mirror = mirror
        self.cursor: dict[str, int] = {}
        self.cache: dict[str, list[str]] = {}

    def _read(self, relative: str) -> list[str]:
        if relative not in self.cache:
            path = self.mirror / relative
            opener = gzip.open if relative.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as f:
                self.cache[relative] = [line.strip() for line in f]
        return self.cache[relative]

    def source(self, dataset: str, langs: tuple[str, str]) -> tuple[str, dict[str, list[str]]]:
        """(provenance, lang → lines) for a dataset's language pair."""
        if dataset == "wmt14-en-de-luong":  # Luong et al.'s files come tokenized, with ##AT##-##AT## hyphens
            return (
                f"mirror: Luong et al.'s tokenized newstest2013 ({LUONG_TEXT.format(lang='{en,de}')})",
                {lang: self._read(LUONG_TEXT.format(lang=lang)) for lang in ("en", "de")},
            )
        if set(langs) == {"en", "ro"}:
            return (
                f"mirror: WMT16 newsdev2016 En-Ro ({ENRO_TEXT.format(lang='{en,ro}')})",
                {lang: self._read(ENRO_TEXT.format(lang=lang)) for lang in ("en", "ro")},
            )
        english = self._read(MULTI30K_TEXT.format(lang="en"))
        if set(langs) == {"de", "en"}:
            return f"mirror: Multi30k train ({MULTI30K_TEXT.format(lang='{de,en}')})", {
                "en": english,
                "de": self._read(MULTI30K_TEXT.format(lang="de")),
            }
        other = next(lang for lang in langs if lang != "en")
        if other not in SYNTHETIC:
            raise UserError(f"no stand-in text for language {other!r}; expected one of {sorted(SYNTHETIC)} or de/ro")
        return (
            f"synthetic: Multi30k English with a made-up '{other}' side ({SYNTHETIC[other][1]})",
            {"en": english, other: [SYNTHETIC[other][0](line) for line in english]},
        )

    def take(self, dataset: str, langs: tuple[str, str], n: int) -> tuple[str, dict[str, list[str]]]:
        where, lines = self.source(dataset, langs)
        start = self.cursor.get(where, 0)
        total = len(lines[langs[0]])
        self.cursor[where] = start + n
        picked = {lang: [lines[lang][(start + i) % total] for i in range(n)] for lang in langs}
        return where, picked


def _fake_french(line: str) -> str:
    return " ".join(word[::-1].replace("e", "é") for word in line.split())


def _fake_spanish(line: str) -> str:
    return " ".join(word[::-1].replace("o", "ó").replace("a", "á") for word in line.split())


def _fake_chinese(line: str) -> str:
    chars = []
    for word in re.findall(r"\w+", line.lower()):
        h = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
        chars.append(CJK[h % len(CJK)] + CJK[(h // len(CJK)) % len(CJK)])
    return "".join(chars) + "。"


SYNTHETIC = {
    "fr": (_fake_french, "each English word reversed, e → é"),
    "es": (_fake_spanish, "each English word reversed, o → ó, a → á"),
    "zh": (_fake_chinese, "each English word → two fixed CJK characters, no spaces"),
}


# ---------------------------------------------------------------------------------------------------------------
# Formats


def render(fmt: str, lines: list[str], lang: str, side: int, set_id: str) -> str:
    """A raw file in a release format; `side` 0 = source, 1 = target (references)."""
    if fmt == "plain" or fmt == "wmt":
        return "".join(f"{line}\n" for line in lines)
    if fmt == "ted_tags":  # metadata lines every 10 segments, as in IWSLT's train.tags
        out = []
        for i, line in enumerate(lines):
            if i % 10 == 0:
                talk = i // 10 + 1
                out += [
                    f"<url>http://www.ted.com/talks/standin_{talk}.html</url>",
                    "<keywords>talks, rehearsal</keywords>",
                    f"<talkid>{talk}</talkid>",
                ]
                out.append(f"<title>{line}</title>" if i % 20 == 0 else f"<description>{line}</description>")
                continue
            out.append(line)
        return "".join(f"{line}\n" for line in out)
    if fmt == "xml":  # IWSLT XML / WMT SGML: <seg id="N"> lines inside documents
        kind = "srcset" if side == 0 else "refset"
        out = [
            '<?xml version="1.0" encoding="UTF-8"?>',
            "<mteval>",
            f'<{kind} setid="{set_id}" srclang="any" trglang="{lang}">',
        ]
        for i, line in enumerate(lines):
            if i % 8 == 0:
                if i:
                    out.append("</doc>")
                out.append(f'<doc docid="standin-{i // 8 + 1}" genre="rehearsal">')
            out.append(f'<seg id="{i + 1}"> {line} </seg>')
        return "\n".join(out + ["</doc>", f"</{kind}>", "</mteval>"]) + "\n"
    if fmt == "nist":  # LDC NIST: a source set, or a reference set holding every document once per reference
        refs = 1 if side == 0 else 4
        kind = "src" if side == 0 else "ref"
        out = [f'<{kind}set setid="{set_id}" srclang="zh" trglang="en">']
        for r in range(refs):
            sysid = f' sysid="ref{r + 1}"' if side else ""
            out.append(f'<DOC docid="standin"{sysid}>')
            out += [
                f"<seg id={i + 1}>{line if not side else f'{line} (ref {r + 1})'}</seg>" for i, line in enumerate(lines)
            ]
            out.append("</DOC>")
        return "\n".join(out + [f"</{kind}set>"]) + "\n"
    raise UserError(f"no stand-in writer for format {fmt!r}")


def load_listings() -> dict[str, dict]:
    return yaml.safe_load(LISTINGS.read_text(encoding="utf-8"))


def listing_key(spec: dict, archive: str) -> str:
    """An archive's key in the listings: its official URL ("manual: <name>" when it has none); an archive inside
    another: "<outer key> :: <member path>"."""
    inner = spec.get("files", {}).get(archive)
    if inner is not None:
        return f"{listing_key(spec, inner['archive'])} :: {inner['path']}"
    urls = grid.urls_of(spec["archives"][archive])
    return urls[0] if urls else f"manual: {archive}"


def real_members(listings: dict, spec: dict, dataset: str, name: str) -> tuple[str, list[str]]:
    """(listing key, the real members a file's `path:` names): itself, or every member its wildcard matches.
    A path the listing lacks is a one-line error naming both."""
    entry = spec["files"][name]
    key = listing_key(spec, entry["archive"])
    if key not in listings:
        raise UserError(
            f"datasets/{dataset}/files/{name}: no real listing of its archive {key!r} in {LISTINGS}; "
            f"add the release's member names there, with their public source"
        )
    members = listings[key]["members"]
    found = (
        sorted(fnmatch.filter(members, entry["path"]))
        if any(c in entry["path"] for c in "*?[")
        else [entry["path"]]
        if entry["path"] in members
        else []
    )
    if not found:
        raise UserError(
            f"datasets/{dataset}/files/{name}: path {entry['path']!r} is not in the real listing of "
            f"{key} ({listings[key]['source'].split(';')[0].strip()}); expected one of its members"
        )
    return key, found


def spread(data: bytes, members: list[str]) -> dict[str, bytes]:
    """A plain text's lines over the files a wildcard matches, in the order extraction concatenates them (sorted);
    the last non-empty file loses its final newline, as some real files do."""
    lines = data.decode("utf-8").splitlines(keepends=True)
    base, extra = divmod(len(lines), len(members))
    out, start = {}, 0
    for i, member in enumerate(members):
        size = base + (i < extra)
        out[member] = "".join(lines[start : start + size]).encode("utf-8")
        start += size
    last = max((m for m in members if out[m]), key=members.index, default=None)
    if last is not None:
        out[last] = out[last].rstrip(b"\n")
    return out


def pack(archive: str, members: dict[str | None, bytes]) -> bytes:
    buffer = io.BytesIO()
    named = {name: data for name, data in members.items() if name is not None}  # an archive's members
    if archive.endswith((".tgz", ".tar.gz", ".tar")):
        with tarfile.open(fileobj=buffer, mode="w:gz" if not archive.endswith(".tar") else "w") as tar:
            for name, data in sorted(named.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
    elif archive.endswith(".zip"):
        with zipfile.ZipFile(buffer, "w") as zf:
            for name, data in sorted(named.items()):
                zf.writestr(zipfile.ZipInfo(name, date_time=(2014, 1, 1, 0, 0, 0)), data)
    elif archive.endswith(".gz"):
        if list(members) != [None]:
            raise UserError(f"{archive}: a .gz holds one file, not members {sorted(map(str, members))}")
        return gzip.compress(members[None], mtime=0)
    else:
        raise UserError(f"{archive}: no stand-in packer for this archive type")
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------------------------


def build(config: dict, mirror: Path, out: Path, listings: dict | None = None) -> Manifest:
    """Write the stand-in mirror (and user directories) under `out`; `config` is the full config, `listings` the
    releases' real member names (default: LISTINGS)."""
    listings = load_listings() if listings is None else listings
    mirror = mirror.resolve()
    missing = [name for name in TEXT_FILES if not (mirror / name).is_file()]
    if missing:
        raise UserError(
            f"data mirror {mirror}: missing {', '.join(missing)}; the stand-ins take their real text from "
            f"{len(TEXT_FILES)} files there (Multi30k's training set, WMT16's newsdev2016 En-Ro, Luong et al.'s "
            f'newstest2013 En-De: README.md, "The two commands, and more checks")'
        )
    out.mkdir(parents=True, exist_ok=True)
    link_tree(mirror, out / "mirror")
    real = {**config, "data_mirror": str(mirror)}
    pool, manifest = TextPool(mirror), Manifest()
    contents: dict[tuple[str, str], bytes] = {}  # (dataset, file name) → bytes of each synthesized file
    parts: dict[tuple[str, str], tuple[str, dict[str, list[str]]]] = {}
    for need in needed_files(config):
        spec = config["datasets"][need.dataset]
        if "user_path" not in spec:
            source = grid.file_source(real, need.dataset, need.name)
            if Path(source.path).is_relative_to(mirror):
                manifest.provenance.append(f"| {need.dataset} | {need.name} | real: {source.path} |")
                continue
        if need.part not in parts:
            parts[need.part] = pool.take(need.dataset, need.langs, need.lines)
        where, lines = parts[need.part]
        side = need.langs.index(need.lang)
        path = spec["files"][need.name].get("path", need.name)
        fmt = "xml" if need.fmt == "wmt" and path.endswith(".sgm") else need.fmt  # the release's SGML, not plain
        text = render(fmt, lines[need.lang], need.lang, side, need.name.split(".")[0])
        contents[(need.dataset, need.name)] = text.encode("utf-8")
        manifest.provenance.append(
            f"| {need.dataset} | {need.name} | {where}, {len(lines[need.lang])} lines, format {fmt} |"
        )
    for (dataset, name), data in contents.items():
        manifest.digests[(dataset, name)] = digests(data)
    write_packed(config, contents, out, manifest, listings)
    (out / "manifest.json").write_text(
        json.dumps(
            {
                "digests": {f"{d}/{n}": v for (d, n), v in sorted(manifest.digests.items())},
                "user_paths": manifest.user_paths,
            },
            indent=1,
        )
    )
    (out / "STANDINS.md").write_text(
        "# Rehearsal stand-ins: NOT the real corpora\n\nSmall inputs in the releases' formats, for `make rehearse`"
        " only (no BLEU meaning). `real:` rows are symlinks into the data mirror.\n\n| dataset | file | source |\n"
        "|---|---|---|\n" + "\n".join(sorted(manifest.provenance)) + "\n",
        encoding="utf-8",
    )
    return manifest


def write_packed(
    config: dict, contents: dict[tuple[str, str], bytes], out: Path, manifest: Manifest, listings: dict
) -> None:
    """Place each synthesized file where file_source looks for it: at the mirror root, in the user directory, or
    in its archive, built here with the release's real member names and nested as the release nests it (inner
    archives are packed first)."""
    members: dict[tuple[str, str], dict[str | None, bytes]] = {}  # (dataset, archive) → member path → bytes
    keys: dict[tuple[str, str], str] = {}  # (dataset, archive) → its listing key

    def place(dataset: str, name: str, data: bytes) -> None:
        spec = config["datasets"][dataset]
        entry = spec["files"].get(name, {})
        if "user_path" in spec:
            write_file(out / "user" / dataset / entry.get("path", name), data)
            manifest.user_paths[dataset] = str((out / "user" / dataset).resolve())
        elif entry.get("archive") is None:
            write_file(out / "mirror" / spec.get("mirror", dataset) / name, data)
        elif entry.get("path") is None:  # a single-file .gz
            members.setdefault((dataset, entry["archive"]), {})[None] = data
        else:
            keys[(dataset, entry["archive"])], found = real_members(listings, spec, dataset, name)
            packed = spread(data, found) if len(found) > 1 else {found[0]: data}
            members.setdefault((dataset, entry["archive"]), {}).update(packed)

    def depth(dataset: str, archive: str) -> int:
        files = config["datasets"][dataset]["files"]
        return 0 if archive not in files else 1 + depth(dataset, files[archive].get("archive", ""))

    for (dataset, name), data in contents.items():
        place(dataset, name, data)
    while members:  # the most deeply nested archive first: packing it makes it a member of its parent
        dataset, archive = max(members, key=lambda key: depth(*key))
        inside = members.pop((dataset, archive))
        if (dataset, archive) in keys:  # every other member of the real release, so wildcards meet them too
            inside = {**{m: PLACEHOLDER for m in listings[keys[(dataset, archive)]]["members"]}, **inside}
        packed = pack(archive, inside)
        manifest.digests[(dataset, archive)] = digests(packed)
        place(dataset, archive, packed)


def write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_bytes(data)


def link_tree(src: Path, dst: Path) -> None:
    """dst mirrors src with a symlink per file (stand-ins are then added beside the real files)."""
    for root, _, names in os.walk(src):
        target = dst / Path(root).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            link = target / name
            if not link.exists() and not link.is_symlink():
                link.symlink_to(Path(root) / name)
