-- The totals the list routes answer (`pagination.total`, the unread count, a coop's transaction
-- count), kept by triggers in the transaction that changes the rows, so that reading a page no
-- longer counts every row of the list: before, history and notifications read in time that grew
-- with the coop's history (INTERFACE.md §3, pagination).
--
-- `history_counts`: the transactions each history filter matches, '' standing for "any": a row
-- per (coop, account or '', currency or ''). A transaction counts for '' and for each of its
-- accounts (payer, payee), crossed with '' and each of its currencies (source, target).
CREATE TABLE history_counts (
    coop_id  TEXT NOT NULL,
    account  TEXT NOT NULL,
    currency TEXT NOT NULL,
    n        BIGINT NOT NULL,
    PRIMARY KEY (coop_id, account, currency)
);

WITH accounts AS (
    SELECT pos, coop_id, '' AS account FROM transactions
    UNION SELECT pos, coop_id, from_account FROM transactions
    UNION SELECT pos, coop_id, to_account FROM transactions
), currencies AS (
    SELECT pos, '' AS currency FROM transactions
    UNION SELECT pos, currency FROM transactions
    UNION SELECT pos, to_currency FROM transactions WHERE to_currency IS NOT NULL
)
INSERT INTO history_counts (coop_id, account, currency, n)
SELECT a.coop_id, a.account, c.currency, COUNT(*) FROM accounts a JOIN currencies c ON c.pos = a.pos
GROUP BY a.coop_id, a.account, c.currency;

-- Counted at COMMIT, like the events' numbers (0011): the coop's row ('', '') is every payment's,
-- and taken inside the commit it is held for the commit alone, not for the rest of the unit of
-- work. The rows are taken in key order ('' first), so two commits never wait for each other in
-- a cycle (a row naming an account is also that account's: its balance row, locked earlier by
-- the same unit of work, already orders them).
CREATE FUNCTION count_transaction() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO history_counts (coop_id, account, currency, n)
    SELECT NEW.coop_id, a.account, c.currency, 1
    FROM (SELECT '' AS account UNION SELECT NEW.from_account UNION SELECT NEW.to_account) a,
         (SELECT '' AS currency UNION SELECT NEW.currency
          UNION SELECT NEW.to_currency WHERE NEW.to_currency IS NOT NULL) c
    ORDER BY a.account, c.currency
    ON CONFLICT (coop_id, account, currency) DO UPDATE SET n = history_counts.n + 1;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER transactions_counted_at_commit
    AFTER INSERT ON transactions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION count_transaction();

-- `notification_counts`: each recipient's notifications in a coop, and how many are unread.
-- Kept once per statement (a fan-out inserts a coop's members at once, the prune deletes many),
-- each statement taking the rows in key order.
CREATE TABLE notification_counts (
    recipient TEXT NOT NULL,
    coop_id   TEXT NOT NULL,
    total     BIGINT NOT NULL,
    unread    BIGINT NOT NULL,
    PRIMARY KEY (recipient, coop_id)
);

INSERT INTO notification_counts (recipient, coop_id, total, unread)
SELECT recipient, coop_id, COUNT(*), COUNT(*) FILTER (WHERE read_at IS NULL)
FROM notifications GROUP BY recipient, coop_id;

CREATE FUNCTION count_added_notifications() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO notification_counts (recipient, coop_id, total, unread)
    SELECT recipient, coop_id, COUNT(*), COUNT(*) FILTER (WHERE read_at IS NULL)
    FROM added GROUP BY recipient, coop_id ORDER BY recipient, coop_id
    ON CONFLICT (recipient, coop_id) DO UPDATE
    SET total = notification_counts.total + excluded.total,
        unread = notification_counts.unread + excluded.unread;
    RETURN NULL;
END
$$;

-- Read or unread again: the unread count moves by the difference.
CREATE FUNCTION count_read_notifications() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM 1 FROM notification_counts c
    WHERE (c.recipient, c.coop_id) IN (SELECT recipient, coop_id FROM added)
    ORDER BY c.recipient, c.coop_id FOR UPDATE;
    UPDATE notification_counts c SET unread = c.unread + d.delta
    FROM (
        SELECT recipient, coop_id, SUM(delta) AS delta FROM (
            SELECT recipient, coop_id, CASE WHEN read_at IS NULL THEN 1 ELSE 0 END AS delta FROM added
            UNION ALL
            SELECT recipient, coop_id, CASE WHEN read_at IS NULL THEN -1 ELSE 0 END FROM removed
        ) AS changes GROUP BY recipient, coop_id
    ) AS d
    WHERE c.recipient = d.recipient AND c.coop_id = d.coop_id AND d.delta <> 0;
    RETURN NULL;
END
$$;

CREATE FUNCTION count_removed_notifications() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM 1 FROM notification_counts c
    WHERE (c.recipient, c.coop_id) IN (SELECT recipient, coop_id FROM removed)
    ORDER BY c.recipient, c.coop_id FOR UPDATE;
    UPDATE notification_counts c SET total = c.total - d.total, unread = c.unread - d.unread
    FROM (
        SELECT recipient, coop_id, COUNT(*) AS total, COUNT(*) FILTER (WHERE read_at IS NULL) AS unread
        FROM removed GROUP BY recipient, coop_id
    ) AS d
    WHERE c.recipient = d.recipient AND c.coop_id = d.coop_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER notifications_counted AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION count_added_notifications();
CREATE TRIGGER notifications_read AFTER UPDATE ON notifications
    REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION count_read_notifications();
CREATE TRIGGER notifications_uncounted AFTER DELETE ON notifications
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION count_removed_notifications();
