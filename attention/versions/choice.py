"""Which version's rules answer: a `--vllm-version`, the vLLM installed here (package metadata, never
an import), or the newest. The one place that maps a version string to a version object."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from attnsel.attention.versions.profile import RuleProfile
from attnsel.attention.versions.registry import (
    available_profiles,
    release_of,
    release_profiles,
    resolved_data,
)
from attnsel.errors import UserInputError
from attnsel.files import shown_path

if TYPE_CHECKING:
    from attnsel.attention.versions.adapter_facts import AdapterFacts

DEFAULT_PROFILE = "seed_0_17"  # the library default (the era attnsel was specified from)


@cache
def load_profile(name: str) -> RuleProfile:
    """The version object of one data file (built once per process)."""
    return RuleProfile(resolved_data(name))


@dataclass(frozen=True)
class ProfileChoice:
    profile: RuleProfile
    requested: str | None
    note: str | None = None  # set when the profile only approximates the requested version
    source: str = "default"  # "--vllm-version" | "installed" | "newest" | "default"
    installed_version: str | None = None  # vLLM found in this environment (package metadata)

    @property
    def reason(self) -> str:
        """One line: which profile answered and why."""
        name = f"{self.profile.name} (vLLM {self.profile.vllm_version})"
        if self.source == "--vllm-version":
            why = f"--vllm-version {self.requested}"
        elif self.source == "installed":
            why = f"vLLM {self.installed_version} is installed here"
        elif self.source == "newest":
            why = "no vLLM installed here: the newest profile"
        else:
            why = "the default profile"
        return f"rule profile {name}: {why}" + (f"; {self.note}" if self.note else "")


_VERSION_PREFIX = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_TOO_MANY_DIGITS = re.compile(r"\d{7,}")  # no version part has more (int() of thousands of digits raises)


def parse_vllm_version(text: str) -> tuple[int, int, int] | None:
    """"0.33.0", "v0.20", "0.19.1rc1.dev5+g1234" -> (0, 33, 0), (0, 20, 0), (0, 19, 1); else None."""
    match = _VERSION_PREFIX.match(str(text).strip().lower())
    if not match or _TOO_MANY_DIGITS.search(match.group(0)):
        return None
    return tuple(int(part or 0) for part in match.groups())  # type: ignore[return-value]


# What --vllm-version takes as a version (besides profile names and their aliases): X.Y or X.Y.Z with an
# optional leading v and PEP 440's pre-release, post-release, dev-release and local parts, as vLLM's wheels
# and source builds are numbered (0.34.0, 0.19.1rc1, 0.11.0.post1, 0.12.1.dev5+g1234.cu128). Nothing else:
# `0.33abc`, `0.33;rm`, `0x21`, `1e3` are typos, not versions (parse_vllm_version reads them by prefix).
_VERSION_FLAG = re.compile(r"v?\d{1,6}\.\d{1,6}(?:\.\d{1,6})?(?:(?:a|b|rc)\d{1,6})?(?:\.post\d{1,6})?"
                           r"(?:\.dev\d{1,6})?(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?")


def is_version_text(text: str) -> bool:
    """Whether a --vllm-version value is spelled as a vLLM version (see _VERSION_FLAG)."""
    return _VERSION_FLAG.fullmatch(str(text).strip().lower()) is not None



def _version_str(release: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in release)


def profile_for_version(version: str) -> ProfileChoice:
    """The profile for a vLLM version: the same major.minor, else the nearest older profile.

    Older than every profile -> the oldest, with a note; newer than every profile -> the newest.
    """
    release = parse_vllm_version(version)
    if release is None:
        raise UserInputError(f"cannot read a vLLM version from {version!r} (expected e.g. 0.33.0)")
    names = release_profiles()
    older = [n for n in names if release_of(n)[:2] <= release[:2]]
    if not older:
        oldest = names[0]
        note = (
            f"vLLM {version} is older than every rule profile; answered with the oldest, "
            f"{oldest} (vLLM {_version_str(release_of(oldest))}), so the answer may be wrong"
        )
        return ProfileChoice(load_profile(oldest), version, note)
    chosen = older[-1]
    if release_of(chosen)[:2] == release[:2]:
        return ProfileChoice(load_profile(chosen), version)
    if chosen == names[-1]:
        note = (
            f"vLLM {version} is newer than every rule profile; answered with the newest, "
            f"{chosen} (vLLM {_version_str(release_of(chosen))}); run `attnsel explain --compare-live` to check"
        )
    else:
        note = (
            f"no rule profile for vLLM {version}; answered with {chosen} "
            f"(vLLM {_version_str(release_of(chosen))}), the nearest older one"
        )
    return ProfileChoice(load_profile(chosen), version, note)


# aliases no data file holds: computed from the versions folder
NEWEST_ALIAS = "head"  # the newest release in this folder


def aliases(name: str) -> list[str]:
    """What a profile answers for: its data's `answers_for`, plus `head` for the newest release."""
    listed = list(resolved_data(name).get("answers_for", []))
    return [*listed, NEWEST_ALIAS] if name == release_profiles()[-1] else listed


def profile_name_for(name_or_alias: str) -> str | None:
    """The profile a name or one of its aliases names exactly; None if none does."""
    wanted = str(name_or_alias).strip().lower()
    for name in available_profiles():
        known = [a.lower() for a in aliases(name)]
        if wanted == name or wanted in known or wanted.removeprefix("v") in known:
            return name
    return None


def choose_profile(name_or_version: str | None = None) -> ProfileChoice:
    """Pick the profile answering for a profile name or vLLM version; None gives the default.

    The default (library API) stays the oldest-era profile; the CLI uses `select_profile()`, which
    looks at the installed vLLM first.
    """
    if name_or_version is None or not str(name_or_version).strip():
        return ProfileChoice(load_profile(DEFAULT_PROFILE), None)
    wanted = str(name_or_version).strip().lower()
    named = profile_name_for(wanted)
    if named is not None:
        return ProfileChoice(load_profile(named), name_or_version, source="--vllm-version")
    if not is_version_text(wanted):
        known = "; ".join(
            f"{n} ({', '.join(aliases(n))})" for n in available_profiles()
        )
        if parse_vllm_version(wanted) is not None:  # a version's prefix with something else after it
            raise UserInputError(f"--vllm-version {shown_path(name_or_version)} is not a vLLM version (X.Y or X.Y.Z, "
                                 f"e.g. 0.33.0) nor a profile name. Known profiles: {known}")
        raise UserInputError(f"no rule profile for vLLM {shown_path(name_or_version)}. Known profiles: {known}")
    choice = profile_for_version(str(name_or_version).strip())
    return dataclasses.replace(choice, source="--vllm-version")


def installed_vllm_version() -> str | None:
    """The vLLM version installed in this environment, from package metadata (never imports vLLM).

    The first `vllm-*.dist-info` on sys.path, as importlib.metadata finds it, read directly:
    importing importlib.metadata (and the email parser it brings) costs ~20 ms of every `explain`.
    Anything else (an egg-info, an unreadable METADATA) asks importlib.metadata."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            lowered = name.lower()
            if lowered.startswith("vllm-") and lowered.endswith(".dist-info"):
                version = _metadata_version(os.path.join(entry or ".", name, "METADATA"))
                return version if version is not None else _version_from_importlib()
            if lowered.startswith("vllm") and lowered.endswith(".egg-info"):
                return _version_from_importlib()
    return None


def _metadata_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as metadata:
            for line in metadata:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():  # end of the headers
                    break
    except OSError:
        return None
    return None


def _version_from_importlib() -> str | None:
    import importlib.metadata  # deferred: only where the installed vLLM's version is asked (its metadata, never vLLM)

    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def select_profile(version_flag: str | None = None) -> ProfileChoice:
    """The CLI's choice: --vllm-version if given; else the installed vLLM's version; else the newest."""
    if version_flag is not None and str(version_flag).strip():
        return choose_profile(version_flag)
    installed = installed_vllm_version()
    if installed is None:
        return ProfileChoice(load_profile(release_profiles()[-1]), None, source="newest")
    choice = profile_for_version(installed)
    return dataclasses.replace(choice, source="installed", installed_version=installed)


def get_profile(name_or_version: str | None = None) -> RuleProfile:
    """The rule profile for a profile name ("seed_0_17") or a vLLM version ("0.17.0"); loads lazily."""
    return choose_profile(name_or_version).profile


def installed_adapter_facts() -> tuple[str | None, AdapterFacts | None, str | None]:
    """(the installed vLLM's version, the facts its profile holds, one line when those facts were not
    checked on that release); (None, None, None) without vLLM. The installed version picks the
    profile as the CLI does (choice.py): the same major.minor, else the nearest older one."""
    installed = installed_vllm_version()
    if installed is None:
        return None, None, None
    try:
        choice = profile_for_version(installed)
    except Exception:  # noqa: BLE001 -- an unreadable version string: no facts to offer
        return installed, None, f"vLLM {installed} is installed: attnsel cannot tell its release, so no adapter facts were checked on it"
    facts = choice.profile.adapter_facts
    if facts is None:
        return installed, None, (f"vLLM {installed} is installed: {choice.profile.name} has no adapter facts, "
                                 f"so tune cannot drive vLLM's own classes with checked facts")
    if facts.checked and choice.note is None:
        return installed, facts, None
    return installed, facts, (f"vLLM {installed} is installed and attnsel's adapters were not checked on it: "
                              f"tune drives its classes with the facts of {facts.describe()}")
