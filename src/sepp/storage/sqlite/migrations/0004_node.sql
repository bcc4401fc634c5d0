-- sepp SQLite schema, version 4: the node that leased a job (attempt history
-- names the node). Set with the lease (lease_ready) and written into each attempt's history
-- entry by its nack or lease expiry; the implicit completed attempt reads it from here.
-- NULL for jobs never leased or leased before this version (read as "").
ALTER TABLE jobs ADD COLUMN node TEXT;
