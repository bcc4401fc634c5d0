"""Save an order and its confirmation job in one PostgreSQL transaction, with psycopg 3
(docs/enqueue-in-transaction.md). Either both are stored or neither: the second order below
fails after its job was enqueued, and its job goes with the rollback.

    python examples/enqueue_in_transaction_psycopg.py --dsn postgresql://app@db/shop [--schema sepp]
"""

from __future__ import annotations

import argparse

import psycopg

from sepp import EnqueueRequest, Payload
from sepp.postgres import enqueue


def place_order(conn: psycopg.Connection, order_id: int, total: float, *, schema: str = "sepp",
                table: str = "orders", fail: bool = False) -> str:
    """Insert the order and enqueue its confirmation in one transaction; returns the job id.
    ``fail`` raises after both, to show the rollback taking the job too."""
    with conn.transaction():
        conn.execute(f"INSERT INTO {table} (id, total) VALUES (%s, %s)", (order_id, total))
        ack = enqueue(conn, EnqueueRequest("emails", "order-confirmation", payload=Payload.json({"order": order_id}),
                                           idempotency_key=f"order-confirmation-{order_id}"), schema=schema)
        if fail:
            raise RuntimeError(f"order {order_id}: payment declined")
        return str(ack.job_id)  # a Rejection has no job_id: a refused job fails the order


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", default="sepp", help="sepp's schema ([postgres] schema)")
    parser.add_argument("--table", default="orders", help="the application's table")
    args = parser.parse_args(argv)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {args.table} (id bigint PRIMARY KEY, total numeric)")
        print("order 1 saved, job", place_order(conn, 1, 99.5, schema=args.schema, table=args.table))
        try:
            place_order(conn, 2, 10.0, schema=args.schema, table=args.table, fail=True)
        except RuntimeError as exc:
            print(f"{exc}: neither the order nor its job was stored")


if __name__ == "__main__":
    main()
