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
    n        INTEGER NOT NULL,
    PRIMARY KEY (coop_id, account, currency)
) WITHOUT ROWID;

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

CREATE TRIGGER transactions_counted AFTER INSERT ON transactions BEGIN
    INSERT INTO history_counts (coop_id, account, currency, n)
    SELECT NEW.coop_id, a.account, c.currency, 1
    FROM (SELECT '' AS account UNION SELECT NEW.from_account UNION SELECT NEW.to_account) a,
         (SELECT '' AS currency UNION SELECT NEW.currency
          UNION SELECT NEW.to_currency WHERE NEW.to_currency IS NOT NULL) c
    WHERE true
    ON CONFLICT (coop_id, account, currency) DO UPDATE SET n = n + 1;
END;

-- `notification_counts`: each recipient's notifications in a coop, and how many are unread.
CREATE TABLE notification_counts (
    recipient TEXT NOT NULL,
    coop_id   TEXT NOT NULL,
    total     INTEGER NOT NULL,
    unread    INTEGER NOT NULL,
    PRIMARY KEY (recipient, coop_id)
) WITHOUT ROWID;

INSERT INTO notification_counts (recipient, coop_id, total, unread)
SELECT recipient, coop_id, COUNT(*), SUM(CASE WHEN read_at IS NULL THEN 1 ELSE 0 END)
FROM notifications GROUP BY recipient, coop_id;

CREATE TRIGGER notifications_counted AFTER INSERT ON notifications BEGIN
    INSERT INTO notification_counts (recipient, coop_id, total, unread)
    VALUES (NEW.recipient, NEW.coop_id, 1, CASE WHEN NEW.read_at IS NULL THEN 1 ELSE 0 END)
    ON CONFLICT (recipient, coop_id) DO UPDATE SET total = total + 1, unread = unread + excluded.unread;
END;

CREATE TRIGGER notifications_read AFTER UPDATE OF read_at ON notifications
WHEN (OLD.read_at IS NULL) <> (NEW.read_at IS NULL) BEGIN
    UPDATE notification_counts SET unread = unread + CASE WHEN NEW.read_at IS NULL THEN 1 ELSE -1 END
    WHERE recipient = NEW.recipient AND coop_id = NEW.coop_id;
END;

CREATE TRIGGER notifications_uncounted AFTER DELETE ON notifications BEGIN
    UPDATE notification_counts
    SET total = total - 1, unread = unread - CASE WHEN OLD.read_at IS NULL THEN 1 ELSE 0 END
    WHERE recipient = OLD.recipient AND coop_id = OLD.coop_id;
END;
