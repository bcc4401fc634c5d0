"""Save an order and its confirmation job in one transaction, with SQLAlchemy 2 on psycopg 3
(docs/enqueue-in-transaction.md): the job is enqueued on the session's own connection.

    python examples/enqueue_in_transaction_sqlalchemy.py --dsn postgresql://app@db/shop [--schema sepp]
"""

from __future__ import annotations

import argparse

from sqlalchemy import BigInteger, Numeric, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sepp import EnqueueRequest, Payload
from sepp.postgres import enqueue


class Base(DeclarativeBase):
    """The application's models."""


def order_model(table: str) -> type[Base]:
    """An ``Order`` model on ``table`` (a parameter so the example's test uses a table of its own)."""

    class Order(Base):
        __tablename__ = table
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
        total: Mapped[float] = mapped_column(Numeric)

    return Order


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="postgresql://… (psycopg 3 is used)")
    parser.add_argument("--schema", default="sepp", help="sepp's schema ([postgres] schema)")
    parser.add_argument("--table", default="orders", help="the application's table")
    args = parser.parse_args(argv)
    engine = create_engine(args.dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    order = order_model(args.table)
    Base.metadata.create_all(engine)
    for order_id, fail in ((1, False), (2, True)):
        try:
            with Session(engine) as session, session.begin():
                session.add(order(id=order_id, total=99.5))
                session.flush()
                raw = session.connection().connection.driver_connection  # the psycopg connection
                ack = enqueue(raw, EnqueueRequest("emails", "order-confirmation",
                                                  payload=Payload.json({"order": order_id})), schema=args.schema)
                if fail:
                    raise RuntimeError(f"order {order_id}: payment declined")
            print(f"order {order_id} saved, job {ack.job_id}")
        except RuntimeError as exc:
            print(f"{exc}: neither the order nor its job was stored")
    engine.dispose()


if __name__ == "__main__":
    main()
