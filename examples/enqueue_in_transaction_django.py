"""Save an order and its confirmation job in one transaction, in Django
(docs/enqueue-in-transaction.md): ``transaction.atomic()`` and ``connection.cursor()``.
Configured in code to stay one file; in a project the settings module does it.

    python examples/enqueue_in_transaction_django.py --dsn postgresql://app@db/shop [--schema sepp]
"""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit

import django
from django.conf import settings

from sepp import EnqueueRequest, Payload
from sepp.postgres import enqueue


def configure(dsn: str) -> None:
    """Django settings for the database at ``dsn`` (psycopg 3 is Django's PostgreSQL driver)."""
    url = urlsplit(dsn)
    settings.configure(DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": url.path.lstrip("/"), "USER": url.username or "",
        "PASSWORD": url.password or "", "HOST": url.hostname or "", "PORT": str(url.port or 5432)}})
    django.setup()


def place_order(order_id: int, total: float, *, schema: str, table: str, fail: bool = False) -> str:
    """The order row and its job in one ``transaction.atomic()``; returns the job id."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} (id, total) VALUES (%s, %s)", [order_id, total])
        ack = enqueue(cursor, EnqueueRequest("emails", "order-confirmation",
                                             payload=Payload.json({"order": order_id})), schema=schema)
        if fail:
            raise RuntimeError(f"order {order_id}: payment declined")
        return str(ack.job_id)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", default="sepp", help="sepp's schema ([postgres] schema)")
    parser.add_argument("--table", default="orders", help="the application's table")
    args = parser.parse_args(argv)
    configure(args.dsn)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {args.table} (id bigint PRIMARY KEY, total numeric)")
    print("order 1 saved, job", place_order(1, 99.5, schema=args.schema, table=args.table))
    try:
        place_order(2, 10.0, schema=args.schema, table=args.table, fail=True)
    except RuntimeError as exc:
        print(f"{exc}: neither the order nor its job was stored")


if __name__ == "__main__":
    main()
