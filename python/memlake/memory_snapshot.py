"""Memory snapshots in PyTorch's form, for pytorch.org/memory_viz and
torch.cuda._memory_viz, from the C API's memlake_memory_snapshot_json (which
needs the timeline option: MEMLAKE_CONF=timeline:PATH).

The dictionary is what torch.cuda.memory._snapshot() returns:

    {"segments": [Segment, ...],             # one per mapped range
     "device_traces": [[TraceEntry, ...], ...]}   # one list per device

A Segment is a range memlake mapped (its "stitched" key says whether it maps
chunks that existed before it); its "blocks" tile it: the live blocks
("active_allocated") and the gaps between them ("inactive"). A chunk mapped
in several ranges shows in each, so the segments add up to the mapped bytes,
which can exceed the physical bytes memlake holds. TraceEntries are alloc,
free_requested and free_completed (a free goes back to memlake at once, so
the two come together), segment_map and segment_unmap, and oom, each with
its stream and time_us (microseconds since the timeline began).
"""

import ctypes
import json
import pickle

from . import _native

MAX_DEVICES = 64


def _device_json(device):
    """The device's snapshot JSON text; raises RuntimeError naming the cause."""
    lib = _native.load()
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        need = lib.memlake_memory_snapshot_json(device, buf, size)
        if need < 0:
            raise RuntimeError(_native.last_error())
        if need < size:
            return buf.value.decode()
        size = need + (need >> 3) + 4096  # the state may grow between the calls


def _from_json(text):
    data = json.loads(text)
    for seg in data["segments"]:
        seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    return data


def _merge(parts):
    """One snapshot of several devices' parts."""
    merged = {"segments": [], "device_traces": []}
    for part in parts:
        merged["segments"].extend(part["segments"])
        traces = part["device_traces"]
        while len(merged["device_traces"]) < len(traces):
            merged["device_traces"].append([])
        for d, trace in enumerate(traces):
            merged["device_traces"][d].extend(trace)
    return merged


def snapshot(device=None):
    """The snapshot of one device, or (None) of every device whose allocator
    records a timeline. Raises RuntimeError when there is none (no allocation
    yet, or the timeline option is off), saying which."""
    if device is not None:
        return _from_json(_device_json(device))
    parts, first_error = [], None
    for d in range(MAX_DEVICES):
        try:
            parts.append(_from_json(_device_json(d)))
        except RuntimeError as e:
            if first_error is None:
                first_error = e
    if not parts:
        raise first_error
    return _merge(parts)


def dump_snapshot(filename="dump_snapshot.pickle", device=None):
    """Pickles snapshot(device) to `filename`, as torch.cuda.memory._dump_snapshot
    does: drag the file onto pytorch.org/memory_viz."""
    data = snapshot(device)
    with open(filename, "wb") as f:
        pickle.dump(data, f)
    return filename
