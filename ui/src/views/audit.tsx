// The audit log (GET /v1/audit/status, admin tokens only): whether the service writes one, and each worker's
// chain head, which an operator keeps to pass to `keystream-server audit verify --expect-head` later.
import { useEffect, useState } from "preact/hooks";
import { ApiError, describe, json, type AuditStatus } from "../api";

/** What the page says when the token lacks the admin scope: a fact about the token, not a failure. */
const NOT_ALLOWED =
  "This token is not allowed to see the audit log's status: that takes a token with the admin scope.";

function where(status: AuditStatus): string {
  if (!status.enabled) return "off (KEYSTREAM_AUDIT_LOG is not set): requests are not recorded";
  return status.destination === "stdout"
    ? "on, written to standard output (this worker's chain is shown; the others' lines are in the same stream)"
    : "on, one file per worker";
}

export function AuditView() {
  const [status, setStatus] = useState<AuditStatus | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [forbidden, setForbidden] = useState(false);
  const load = (): void => {
    setError(null);
    json<AuditStatus>("GET", "/v1/audit/status").then(setStatus, (caught) => {
      if (caught instanceof ApiError && caught.status === 403) setForbidden(true);
      else setError(describe(caught));
    });
  };
  useEffect(load, []);
  return (
    <section>
      <h1>Audit log</h1>
      {forbidden && <p id="audit-not-allowed">{NOT_ALLOWED}</p>}
      {error !== null && <p role="alert">{error}</p>}
      {status !== null && (
        <>
          <p id="audit-state">The audit log is {where(status)}.</p>
          {status.heads.length > 0 && (
            <>
              <h2>Chain heads</h2>
              <p class="hint">
                Read from the end of each file, not verified. Keep them: <code>keystream-server audit verify
                --expect-head HEAD</code> later shows whether lines were cut from the end of the log.
              </p>
              <table id="audit-heads">
                <thead>
                  <tr>
                    <th>File</th>
                    <th>Head (chain:records:hmac)</th>
                  </tr>
                </thead>
                <tbody>
                  {status.heads.map((head) => (
                    <tr>
                      <td>{head.file ?? "standard output"}</td>
                      <td>{head.head === null ? "no record yet" : <code class="head">{head.head}</code>}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </>
          )}
          <button type="button" id="audit-refresh" onClick={load}>
            Refresh
          </button>
        </>
      )}
    </section>
  );
}
