"""Remote data is checked before it is served: record batches read back from the object store
pass only when every batch is whole and its CRC-32C matches; a flipped byte or a truncated object
raises CorruptRemoteData naming the object and the offset, and no data is handed out."""
from __future__ import annotations

import pytest
import trio

from broker.tiered.object_store import open_store
from broker.tiered.remote_records import CorruptRemoteData, verify_remote_batches
from kproto.errors import ErrorCode
from kproto.records import build_batch

KEY = "orders-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000100-XyZ.log"


def segment() -> tuple[bytes, list[int]]:
    """Three batches at offsets 100 (3 records), 103 (2), 105 (4); and where each starts."""
    batches = [build_batch([(b"k", b"v%d" % i) for i in range(n)], base_offset=base, compression=c)
               for base, n, c in ((100, 3, 0), (103, 2, 1), (105, 4, 0))]
    starts, pos = [], 0
    for b in batches:
        starts.append(pos)
        pos += len(b)
    return b"".join(batches), starts


def test_good_data_read_back_from_the_store_passes(tmp_path):
    data, _ = segment()

    async def main():
        store = open_store({"log.dirs": str(tmp_path / "data")})
        await store.put(KEY, data)
        return await store.get(KEY)
    headers = verify_remote_batches(KEY, trio.run(main), first_offset=100)
    assert [(h.base_offset, h.last_offset_delta) for h in headers] == [(100, 2), (103, 1), (105, 3)]


@pytest.mark.parametrize("batch", [0, 1, 2])
def test_a_flipped_byte_is_reported_with_key_and_offset(batch):
    data, starts = segment()
    corrupt = bytearray(data)
    corrupt[starts[batch] + 70] ^= 0x01          # inside the records of that batch
    with pytest.raises(CorruptRemoteData) as e:
        verify_remote_batches(KEY, bytes(corrupt), first_offset=100)
    offset = (100, 103, 105)[batch]
    assert (e.value.key, e.value.offset, e.value.position) == (KEY, offset, starts[batch])
    assert KEY in str(e.value) and f"offset {offset}" in str(e.value) and "crc" in str(e.value)
    assert e.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_a_truncated_object_is_reported_unless_a_partial_tail_is_allowed():
    data, starts = segment()
    for cut in (len(data) - 1, starts[2] + 30, starts[1] + 5):
        with pytest.raises(CorruptRemoteData) as e:
            verify_remote_batches(KEY, data[:cut], first_offset=100)
        assert "truncated" in str(e.value) and KEY in str(e.value)
    # a range read that cuts the last batch (fetch max bytes): the complete batches only
    headers = verify_remote_batches(KEY, data[:starts[2] + 30], allow_partial_tail=True)
    assert [h.base_offset for h in headers] == [100, 103]


def test_a_bad_length_or_offsets_going_back_are_reported():
    data, starts = segment()
    bad_length = bytearray(data)
    bad_length[starts[1] + 8:starts[1] + 12] = (5).to_bytes(4, "big")   # batchLength 5
    with pytest.raises(CorruptRemoteData) as e:
        verify_remote_batches(KEY, bytes(bad_length))
    assert e.value.offset == 103 and e.value.position == starts[1]
    # the right batches, but not the segment that should start at offset 200
    with pytest.raises(CorruptRemoteData):
        verify_remote_batches(KEY, data, first_offset=200)
