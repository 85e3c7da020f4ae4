"""Which Kafka protocol library the Kafka listener decodes and encodes with: a measurement.

Times the work the listener does per request on its two hottest paths, with each candidate
library: decoding a Produce request (v9, one partition, one record batch) and encoding its
reply, and encoding a Fetch reply (v12, one partition carrying a record batch). The batches'
bytes are the same for both (the record codec is a separate choice: aiokafka's, in C).

    .venv/bin/python bench/kafka_codecs.py [--rounds N]

Candidates: kio (dataclass entities, a native reader) and kafka-python 3's protocol classes
(schemas compiled from Kafka's JSON). The result is in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import io
import time
from collections.abc import Callable

from aiokafka.record.default_records import DefaultRecordBatchBuilder


def _batch(records: int = 100) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for i in range(records):
        builder.append(i, timestamp=1_700_000_000_000, key=None, value=b"x" * 100, headers=[])
    return bytes(builder.build())


def _kafka_python(batch: bytes) -> dict[str, Callable[[], object]]:
    from kafka.protocol.consumer.fetch import FetchResponse
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

    Data = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](
        transactional_id=None, acks=-1, timeout_ms=30000,
        topic_data=[Data(name="kafka.orders", partition_data=[
            Data.PartitionProduceData(index=0, records=batch)])],
    )  # fmt: skip
    wire = request.encode()

    def decode_produce() -> object:
        decoded = ProduceRequest[9].decode(wire)
        partition = decoded.topic_data[0].partition_data[0]
        reply = ProduceResponse[9](responses=[ProduceResponse.TopicProduceResponse(
            name="kafka.orders", partition_responses=[
                ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
                    index=partition.index, error_code=0, base_offset=100, log_append_time_ms=-1,
                    log_start_offset=0, record_errors=[], error_message=None)])],
            throttle_time_ms=0)  # fmt: skip
        return reply.encode()

    def encode_fetch() -> object:
        Topic = FetchResponse.FetchableTopicResponse
        reply = FetchResponse[12](throttle_time_ms=0, error_code=0, session_id=0, responses=[
            Topic(topic="kafka.orders", partitions=[Topic.PartitionData(
                partition_index=0, error_code=0, high_watermark=200, last_stable_offset=200,
                log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                records=batch)])])  # fmt: skip
        return reply.encode()

    return {"produce": decode_produce, "fetch": encode_fetch}


def _kio(batch: bytes) -> dict[str, Callable[[], object]]:
    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v12 import response as fetch
    from kio.schema.produce.v9 import request as produce
    from kio.schema.produce.v9 import response as produced
    from kio.schema.types import TopicName
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

    request = produce.ProduceRequest(
        transactional_id=None, acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(produce.TopicProduceData(name=TopicName("kafka.orders"), partition_data=(
            produce.PartitionProduceData(index=i32(0), records=Records(batch)),)),),
    )  # fmt: skip
    buffer = io.BytesIO()
    entity_writer(produce.ProduceRequest)(buffer, request)
    wire = buffer.getvalue()
    read_produce = entity_reader(produce.ProduceRequest)
    write_produced = entity_writer(produced.ProduceResponse)
    write_fetch = entity_writer(fetch.FetchResponse)
    zero = i32Timedelta.parse(datetime.timedelta(0))

    def decode_produce() -> object:
        decoded, _ = read_produce(wire, 0)
        partition = decoded.topic_data[0].partition_data[0]
        reply = produced.ProduceResponse(throttle_time=zero, responses=(
            produced.TopicProduceResponse(name=TopicName("kafka.orders"), partition_responses=(
                produced.PartitionProduceResponse(
                    index=partition.index, error_code=ErrorCode.none, base_offset=i64(100),
                    log_append_time=None, log_start_offset=i64(0), record_errors=(),
                    error_message=None),)),))  # fmt: skip
        out = io.BytesIO()
        write_produced(out, reply)
        return out.getvalue()

    def encode_fetch() -> object:
        reply = fetch.FetchResponse(
            throttle_time=zero, error_code=ErrorCode.none, session_id=i32(0),
            responses=(fetch.FetchableTopicResponse(topic=TopicName("kafka.orders"), partitions=(
                fetch.PartitionData(
                    partition_index=i32(0), error_code=ErrorCode.none, high_watermark=i64(200),
                    last_stable_offset=i64(200), log_start_offset=i64(0),
                    aborted_transactions=None, preferred_read_replica=i32(-1),
                    records=Records(batch)),)),),
        )  # fmt: skip
        out = io.BytesIO()
        write_fetch(out, reply)
        return out.getvalue()

    return {"produce": decode_produce, "fetch": encode_fetch}


def _time(call: Callable[[], object], rounds: int) -> float:
    for _ in range(200):
        call()
    started = time.perf_counter()
    for _ in range(rounds):
        call()
    return (time.perf_counter() - started) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    args = parser.parse_args()
    batch = _batch()
    print(f"{'library':<14} {'produce request in + reply out':>32} {'fetch reply out':>18}")
    for name, build in (("kio", _kio), ("kafka-python", _kafka_python)):
        calls = build(batch)
        produce = _time(calls["produce"], args.rounds)
        fetch = _time(calls["fetch"], args.rounds)
        print(f"{name:<14} {produce:>29.1f} µs {fetch:>15.1f} µs")


if __name__ == "__main__":
    main()
