"""The test PostgreSQL server is real, unprivileged and reachable only through its socket."""

from __future__ import annotations

import os

import psycopg
import pytest

from pgserver import PostgresServer


def test_server_answers_on_its_socket_and_on_no_tcp_address(pg_server: PostgresServer) -> None:
    with psycopg.connect(pg_server.dsn()) as conn:
        row = conn.execute("SHOW listen_addresses").fetchone()
        assert row == ("",)
        socket_dir = conn.execute("SHOW unix_socket_directories").fetchone()
    assert socket_dir == (str(pg_server.socketdir),)
    assert (pg_server.socketdir / f".s.PGSQL.{pg_server.port}").exists()


def test_server_process_is_not_root(pg_server: PostgresServer) -> None:
    pid = int((pg_server.datadir / "postmaster.pid").read_text().split()[0])
    assert os.stat(f"/proc/{pid}").st_uid != 0


def test_a_role_with_a_password_is_refused_with_a_wrong_one(pg_server: PostgresServer) -> None:
    pg_server.sql("CREATE ROLE pgserver_probe LOGIN PASSWORD 'right-one'")
    with psycopg.connect(pg_server.dsn(user="pgserver_probe", password="right-one")) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("pgserver_probe",)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(pg_server.dsn(user="pgserver_probe", password="wrong-one")).close()
