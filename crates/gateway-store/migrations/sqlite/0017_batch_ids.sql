-- The batch a payment was an item of (`POST /payments/batch`): one id shared by the items of a
-- batch, written with them in its unit of work and never updated; NULL for a payment made on
-- its own and for every transaction recorded before this column. The treasurer's export's
-- `batch_id` column and the history item's `batch_id` read it.
ALTER TABLE transactions ADD COLUMN batch_id TEXT;
