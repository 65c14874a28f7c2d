#!/usr/bin/env python3
"""Checks that the brokers the destination tests need answer at the addresses in
HOOKGATE_TEST_NATS, _AMQP, _REDIS and _MQTT: NATS with JetStream on, RabbitMQ's AMQP 0-9-1,
Redis's PING, an MQTT 5 CONNACK. Exits non-zero naming what is missing, so CI stops before
the tests instead of failing in them."""

import os
import socket
import sys
from urllib.parse import urlparse

TIMEOUT = 5


def address(var, default_port):
    url = urlparse(os.environ[var])
    return url.hostname, url.port or default_port


def nats():
    with socket.create_connection(address("HOOKGATE_TEST_NATS", 4222), TIMEOUT) as s:
        info = s.recv(4096).decode()
        if not info.startswith("INFO"):
            return "no NATS INFO line"
        if '"jetstream":true' not in info.replace(" ", ""):
            return "NATS answers but JetStream is off (start nats-server with -js)"


def amqp():
    with socket.create_connection(address("HOOKGATE_TEST_AMQP", 5672), TIMEOUT) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        frame = s.recv(7)
        if len(frame) < 7 or frame[0] != 1:
            return "no AMQP connection.start"


def redis():
    with socket.create_connection(address("HOOKGATE_TEST_REDIS", 6379), TIMEOUT) as s:
        s.sendall(b"PING\r\n")
        answer = s.recv(64)
        if not answer.startswith(b"+PONG") and b"NOAUTH" not in answer:
            return f"no PONG: {answer!r}"


def mqtt():
    # CONNECT, MQTT 5, clean start, keep-alive 10 s, no properties, a client id.
    client_id = b"hookgate-ci-check"
    variable = b"\x00\x04MQTT\x05\x02\x00\x0a\x00"
    payload = len(client_id).to_bytes(2, "big") + client_id
    body = variable + payload
    with socket.create_connection(address("HOOKGATE_TEST_MQTT", 1883), TIMEOUT) as s:
        s.sendall(b"\x10" + bytes([len(body)]) + body)
        answer = s.recv(16)
        if not answer or answer[0] != 0x20:
            return f"no CONNACK: {answer!r}"
        if len(answer) > 3 and answer[3] != 0:
            return f"CONNACK refused the connection (reason {answer[3]})"
        s.sendall(b"\xe0\x00")


failed = False
for name, check in [("NATS", nats), ("RabbitMQ", amqp), ("Redis", redis), ("MQTT", mqtt)]:
    try:
        problem = check()
    except (OSError, KeyError) as e:
        problem = str(e)
    if problem:
        failed = True
        print(f"{name}: {problem}", file=sys.stderr)
    else:
        print(f"{name}: ok")
if failed:
    print("the broker destination tests cannot run", file=sys.stderr)
    sys.exit(1)
