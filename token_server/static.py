"""Static files: the call page from `web/` and the pinned livekit-client build from `web/node_modules`.

Contract:
- `resolve_page_file(web_dir, path)` maps a URL path to a file inside `web_dir`, or None. It refuses anything
  that would leave `web_dir` (`..`, encoded or not, absolute paths, backslashes, symlinks pointing out),
  hidden names, `node_modules`, tests and npm manifests, and any extension without a known MIME type.
- `VENDOR_FILES` maps the public `/vendor/<name>` URLs to files of the installed `livekit-client` package.
- Page files are sent with `Cache-Control: no-cache` (always revalidated, so a deploy shows at once);
  vendor files with a day of public caching (their version is pinned by web/package-lock.json).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from aiohttp import web

MIME_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".map": "application/json; charset=utf-8",
}
PAGE_CACHE = "no-cache"
VENDOR_CACHE = "public, max-age=86400"
_DENIED_PARTS = {"node_modules", "tests"}
_DENIED_NAMES = {"package.json", "package-lock.json"}

_LIVEKIT_DIST = PurePosixPath("node_modules/livekit-client/dist")
VENDOR_FILES = {
    "livekit-client.umd.js": _LIVEKIT_DIST / "livekit-client.umd.js",
    "livekit-client.umd.js.map": _LIVEKIT_DIST / "livekit-client.umd.js.map",
    "livekit-client.esm.mjs": _LIVEKIT_DIST / "livekit-client.esm.mjs",
    "livekit-client.esm.mjs.map": _LIVEKIT_DIST / "livekit-client.esm.mjs.map",
}


def resolve_page_file(web_dir: Path, path: str) -> Path | None:
    if not path or path.endswith("/"):
        path += "index.html"
    if "\\" in path or "\x00" in path or path.startswith("/"):
        return None
    parts = PurePosixPath(path).parts
    if any(p in ("", ".", "..") or p.startswith(".") or p in _DENIED_PARTS for p in parts):
        return None
    if parts[-1] in _DENIED_NAMES or PurePosixPath(path).suffix not in MIME_TYPES:
        return None
    root = web_dir.resolve()
    candidate = (root / path).resolve()
    if not candidate.is_relative_to(root) or not candidate.is_file():
        return None
    return candidate


def resolve_vendor_file(web_dir: Path, name: str) -> Path | None:
    rel = VENDOR_FILES.get(name)
    if rel is None:
        return None
    candidate = web_dir / rel
    return candidate if candidate.is_file() else None


def vendor_installed(web_dir: Path) -> bool:
    return resolve_vendor_file(web_dir, "livekit-client.umd.js") is not None


def file_response(path: Path, cache_control: str) -> web.FileResponse:
    response = web.FileResponse(path)
    response.content_type = MIME_TYPES[path.suffix].split(";")[0]
    if "charset" in MIME_TYPES[path.suffix]:
        response.charset = "utf-8"
    response.headers["Cache-Control"] = cache_control
    return response
