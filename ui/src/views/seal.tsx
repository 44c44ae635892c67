// The seal's status (GET /v1/sys/seal-status): which seal holds the master key and whether it is sealed.
import { useEffect, useState } from "preact/hooks";
import { describe, json, type SealStatus } from "../api";

export function SealView() {
  const [status, setStatus] = useState<SealStatus | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    json<SealStatus>("GET", "/v1/sys/seal-status").then(setStatus, (caught) => setError(describe(caught)));
  }, []);
  return (
    <section>
      <h1>Seal status</h1>
      {error !== null && <p role="alert">{error}</p>}
      {status !== null && (
        <dl id="seal-status">
          <dt>Seal</dt>
          <dd>{status.type}</dd>
          <dt>State</dt>
          <dd>{status.sealed ? "sealed" : "unsealed"}</dd>
          {status.threshold > 0 && (
            <>
              <dt>Shares</dt>
              <dd>
                {status.progress} given of {status.threshold} needed ({status.shares} exist)
              </dd>
            </>
          )}
        </dl>
      )}
    </section>
  );
}
