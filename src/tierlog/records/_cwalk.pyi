from tierlog.records.header import BatchHeader, Buffer

def walk_records(
    buffer: Buffer, pos: int, end: int, count: int, base_timestamp: int, from_client: bool, /
) -> tuple[bool, int, int, int, int, int, bool, int]: ...

def check_batch(
    buffer: Buffer, computed_crc: int, from_client: bool, /
) -> tuple[int, int, int, bool] | None: ...

def header_copy(buffer: Buffer, position: int, base_offset: int, partition_leader_epoch: int, /) -> bytearray: ...

def write_patched(
    fd: int, buffer: Buffer, position: int, size: int, file_position: int, base_offset: int,
    partition_leader_epoch: int, /
) -> int: ...

def set_header_type(cls: type[BatchHeader], /) -> None: ...

def check_header(
    buffer: Buffer, computed_crc: int, from_client: bool, /
) -> tuple[BatchHeader, int, int, int, bool] | None: ...
