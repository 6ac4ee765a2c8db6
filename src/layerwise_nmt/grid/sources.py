"""Where each raw file of a dataset comes from: the user's directory, the data mirror (the file, its copy, or its
archive), or the official download; what a download is keyed by and checked against."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from .. import UserError
from .layout import download_file, raw_path

MIRROR_ENV = "LWNMT_DATA_MIRROR"


def mirror_dir(config: dict) -> Path | None:
    """`data_mirror` from config, else the LWNMT_DATA_MIRROR environment variable, else None (download)."""
    value = config.get("data_mirror") or os.environ.get(MIRROR_ENV)
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise UserError(f"data_mirror {value!r} is not a directory (config key data_mirror or ${MIRROR_ENV})")
    return path


@dataclass(frozen=True)
class FileSource:
    """Where the workflow gets one raw file: the path it reads and how to turn that into the file."""

    path: str  # a mirror file, a mirror archive, or the download location of the archive
    member: str | None  # path inside the archive; None when `path` is the file itself or a .gz of it
    is_archive: bool
    checksum: tuple[str, str] | None  # ("sha256"|"md5"|"git_blob", digest) of the extracted file
    where: str  # where a good copy comes from (the official URL, or what to do by hand), for error messages
    archive_checksum: tuple[str, str] | None = None  # checked before extracting from a mirrored archive
    checksum_source: str | None = None  # where `checksum` was published (named when it does not match)
    archive_checksum_source: str | None = None
    pair_member: str | None = None  # the other side's wildcard member: files read pairwise, counts checked
    text: bool = False  # the user's own corpus (`local:`): UTF-8 text checked line by line when copied


def checksum_of(entry: dict) -> tuple[str, str] | None:
    for kind in ("sha256", "md5", "git_blob"):
        if entry.get(kind):
            return kind, entry[kind]
    return None


def urls_of(entry: dict) -> list[str]:
    """Where a download comes from, in the order tried: the official URL, then known mirrors."""
    return ([entry["url"]] if entry.get("url") else []) + list(entry.get("mirrors", []))


def where_from(entry: dict) -> str:
    urls = urls_of(entry)
    return " or ".join(urls) if urls else f"by hand ({entry.get('manual', 'see its dataset description')})"


def file_source(config: dict, dataset: str, name: str) -> FileSource:
    """Where one raw file of a dataset comes from, in this order: the user's directory (licensed data), the data
    mirror (the file itself, its `mirror` copy, or its archive), else the official download. An archive may itself
    be a file of the dataset (an archive inside an archive: IWSLT's per-pair .tgz in the campaign .tgz)."""
    spec = config["datasets"][dataset]
    entry = spec["files"][name]
    if "user_path" in spec:
        path = Path(spec["user_path"]).expanduser() / entry.get("path", name)
        local = "local" in spec  # plain text or its .gz (a .gz is inflated, like an archive)
        return FileSource(
            str(path),
            None,
            local and path.name.endswith(".gz"),
            checksum_of(entry),
            f"datasets/{dataset}/{'local' if local else 'user_path'} ({path})",
            text=local,
        )
    archive_name = entry.get("archive")
    archive = spec.get("archives", {}).get(archive_name, {}) if archive_name else {}
    member = entry.get("path")
    where = where_from(archive or entry)
    own = dict(
        checksum=checksum_of(entry), checksum_source=entry.get("checksum_source"), pair_member=pair_member(spec, name)
    )
    mirror = mirror_dir(config)
    if mirror is not None:
        base = mirror / spec.get("mirror", dataset)
        copy = entry.get("mirror")
        if copy and mirrored(base / copy["path"]):
            if copy["path"].endswith(".gz"):  # a compressed copy: check it, then the file it inflates to
                return FileSource(
                    str(base / copy["path"]),
                    None,
                    True,
                    where=where,
                    archive_checksum=checksum_of(copy),
                    archive_checksum_source=copy.get("checksum_source"),
                    **own,
                )
            return FileSource(
                str(base / copy["path"]),
                None,
                False,
                checksum_of(copy),
                where,
                checksum_source=copy.get("checksum_source"),
            )
        if member and mirrored(base / member):
            return FileSource(str(base / member), None, False, where=where, **own)
        if archive_name and mirrored(base / archive_name):
            return FileSource(
                str(base / archive_name),
                member,
                True,
                where=where,
                archive_checksum=checksum_of(archive),
                archive_checksum_source=archive.get("checksum_source"),
                **own,
            )
        if not archive_name and mirrored(base / name):
            return FileSource(str(base / name), None, False, where=where, **own)
        # not mirrored: fall through to the official download (an air-gapped run then fails there, by name)
    if archive_name in spec.get("files", {}):  # extracted from an outer archive first (its own extract job)
        outer = file_source(config, dataset, archive_name)
        return FileSource(raw_path(dataset, archive_name), member, True, where=outer.where, **own)
    if archive_name:
        return FileSource(download_path(archive, archive_name), member, True, where=where, **own)
    return FileSource(download_path(entry, name), None, False, where=where, **own)


def user_file(config: dict, dataset: str, name: str) -> list[str]:
    """The user's own file a raw file is copied from (`user_path`, `local:`), else nothing: a release file's origin
    (the data mirror, the download cache, its URL) is decided when its job runs, so that a finished run does not
    depend on where the file came from."""
    return [file_source(config, dataset, name).path] if "user_path" in config["datasets"][dataset] else []


def file_identity(config: dict, dataset: str, name: str) -> dict:
    """What a raw file is, wherever it comes from: its checksum, the member it is of an archive and that archive's
    identity (an archive inside an archive: the outer one's). The URLs only where no checksum pins the content,
    since then they are all that names it. A data mirror's copy is one way to get the file, not part of it."""
    spec = config["datasets"][dataset]
    entry = spec["files"][name]
    identity = {
        "checksum": checksum_of(entry),
        "member": entry.get("path"),
        "pair_member": pair_member(spec, name),
        "text": "local" in spec,
    }
    archive_name = entry.get("archive")
    if "user_path" in spec:
        return identity
    if archive_name in spec.get("files", {}):
        identity["archive"] = {archive_name: file_identity(config, dataset, archive_name)}
    elif archive_name:
        archive = spec.get("archives", {}).get(archive_name, {})
        identity["archive"] = {archive_name: {"checksum": checksum_of(archive)}}
        if not checksum_of(archive) and not checksum_of(entry):
            identity["archive"][archive_name]["urls"] = urls_of(archive)
    elif not checksum_of(entry):
        identity["urls"] = urls_of(entry)
    return identity


def mirrored(path: Path) -> bool:
    """Whether the data mirror holds this file; something else at its place (a directory) is an error, not a
    silent fall-back to the download."""
    if path.exists() and not path.is_file():
        raise UserError(
            f"{path} is a directory, not a file (or another non-file); expected the file itself there "
            f"(the data mirror's layout: docs/data.md): move it away or replace it with the file"
        )
    return path.is_file()


def pair_member(spec: dict, name: str) -> str | None:
    """The other side of a wildcard member (CWMT's `casia2015/*_c[hn].txt` ↔ `casia2015/*_en.txt`): the one other
    wildcard file of the same archive. Its files are paired with this one's by name and their line counts checked."""
    entry = spec["files"][name]
    if not any(c in entry.get("path", "") for c in "*?["):
        return None
    others = [
        e["path"]
        for n, e in spec["files"].items()
        if n != name and e.get("archive") == entry.get("archive") and any(c in e.get("path", "") for c in "*?[")
    ]
    return others[0] if len(others) == 1 else None


def download_key(entry: dict, name: str) -> str:
    """One download per source, shared by every dataset that names it: keyed by its URL (or, for a file only a
    person can fetch, by its instructions) and its name."""
    source = urls_of(entry)[:1] or [entry.get("manual", "")]
    return hashlib.sha256(f"{source[0]}\n{name}".encode()).hexdigest()[:12]


def downloads(config: dict) -> dict[tuple[str, str], tuple[list[str], dict]]:
    """(key, name) → (the datasets naming it, its entry) for every downloadable archive or file."""
    out: dict = {}
    for dataset, spec in config["datasets"].items():
        if "user_path" in spec:
            continue
        entries = {
            **{n: e for n, e in spec.get("files", {}).items() if urls_of(e) or "manual" in e},
            **spec.get("archives", {}),
        }
        for name, entry in entries.items():
            out.setdefault((download_key(entry, name), name), ([], entry))[0].append(dataset)
    return out


def download_spec(config: dict, key: str, name: str) -> tuple[list[str], dict]:
    """(datasets naming it, entry: URLs, checksum, manual instructions) of results/downloads/<key>/<name>."""
    found = downloads(config).get((key, name))
    if found is None:
        raise UserError(f"results/downloads/{key}/{name}: no archive or file of the config downloads to it")
    return found


def download_path(entry: dict, name: str) -> str:
    return download_file(download_key(entry, name), name)


def unpinned_downloads(config: dict) -> list[tuple[list[str], str, str]]:
    """(datasets, file name, why) of every download or manual file the config gives no checksum for: each is
    checked by Content-Length and, from its first copy on, by the size and sha256 recorded in `<file>.sha256`."""
    return [
        (datasets, name, entry.get("checksum_source") or "no checksum in the config")
        for (_, name), (datasets, entry) in downloads(config).items()
        if checksum_of(entry) is None
    ]
