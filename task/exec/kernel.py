# sandboxd's Python kernel: one IPython shell that runs a session's calls.
#
# sandboxd-init starts it (python3 -c) as the task's user, writes one JSON
# request line per call on fd 4, {"code": ...}, and reads one JSON reply
# line on fd 5. The code's output goes to stdout and stderr as it is
# written; both are flushed before the reply. fd 3 is the tool channel,
# the code's own (docs/tools.md).
import base64
import json
import os
import sys

# Not dumpable: a call of the session runs under the kernel's uid, and
# would otherwise open the kernel's descriptors through /proc/PID/fd
# (runc hides them from others then; the channel is sockets besides).
try:
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
except (OSError, AttributeError):
    pass

_requests = os.fdopen(os.dup(4), "r", encoding="utf-8")
_replies = os.fdopen(os.dup(5), "w", encoding="utf-8")
os.close(4)
os.close(5)
# Programs the code starts must not inherit the kernel's channel.
os.set_inheritable(_requests.fileno(), False)
os.set_inheritable(_replies.fileno(), False)

from IPython.core.displayhook import DisplayHook  # noqa: E402
from IPython.core.displaypub import DisplayPublisher  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from traitlets.config import Config  # noqa: E402

# Bounds on what one reply carries; sandboxd caps the whole reply at 1 MiB.
TEXT_LIMIT = 64 << 10
# Binary displays are written as files of the call's outputs, not sent.
DISPLAY_DIR = "/workspace/.sandboxd/displays"
BINARY = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "application/pdf": "pdf"}

_call = {}


def _mime_bundle(data):
    """A display's data: text by MIME type, and binary types as files."""
    out = {"data": {}}
    for mime, value in data.items():
        if mime in BINARY:
            if isinstance(value, str):
                value = base64.b64decode(value)
            n = len(_call.setdefault("files", [])) + 1
            os.makedirs(DISPLAY_DIR, exist_ok=True)
            name = "%s/%d-%d.%s" % (DISPLAY_DIR, _shell.execution_count, n, BINARY[mime])
            with open(name, "wb") as f:
                f.write(value)
            _call["files"].append(name)
            out.setdefault("files", {})[mime] = os.path.relpath(name, "/workspace")
            continue
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        elif not isinstance(value, str):
            value = json.dumps(value, default=str)
        if len(value) > TEXT_LIMIT:
            value = value[:TEXT_LIMIT] + "\n[truncated]"
        out["data"][mime] = value
    return out


class _Hook(DisplayHook):
    """Keeps the last expression's value for the reply instead of printing
    it."""

    def write_output_prompt(self):
        pass

    def write_format_data(self, format_dict, md_dict=None):
        _call["result"] = _mime_bundle(format_dict)["data"]

    def finish_displayhook(self):
        pass


class _Publisher(DisplayPublisher):
    """Keeps what the code displays, by MIME type, for the reply."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        _call.setdefault("displays", []).append(_mime_bundle(data))

    def clear_output(self, wait=False):
        pass


class _Shell(InteractiveShell):
    displayhook_class = _Hook
    display_pub_class = _Publisher

    def _showtraceback(self, etype, evalue, stb):
        text = "\n".join(stb)
        _call["error"] = {"name": etype.__name__, "value": str(evalue)[:TEXT_LIMIT], "traceback": [text[-TEXT_LIMIT:]]}
        sys.stderr.write(text + "\n")


def _config():
    c = Config()
    c.HistoryManager.hist_file = ":memory:"
    c.InteractiveShell.colors = "NoColor"
    c.InteractiveShell.xmode = "Plain"
    # Figures as PNG without the matplotlib version in their metadata, so
    # that the same chart is the same bytes.
    c.InlineBackend.print_figure_kwargs = {"bbox_inches": "tight", "metadata": {"Software": None}}
    return c


_shell = None


def main():
    global _shell
    shell = _shell = _Shell.instance(config=_config())
    # matplotlib loads the inline backend when it is first imported: a
    # figure is displayed at plt.show() or at the end of the call.
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    while True:
        try:
            line = _requests.readline()
            if not line:
                return
            code = json.loads(line)["code"]
            _call.clear()
            # Each call may grant other tools: the library lists them anew.
            if "sandboxd.tools" in sys.modules:
                sys.modules["sandboxd.tools"]._namespaces = None
            result = shell.run_cell(code, store_history=True)
            sys.stdout.flush()
            sys.stderr.flush()
            reply = {
                "status": "ok" if result.success else "error",
                "execution_count": result.execution_count or 0,
            }
            reply.update(_call)
            reply.pop("files", None)
            _replies.write(json.dumps(reply) + "\n")
            _replies.flush()
        except KeyboardInterrupt:
            # An interrupt that came between calls: nothing to stop.
            continue


main()
