// Tokens: create (scopes, key patterns, ttl and max_ttl; the secret is shown once), list, revoke.
import { useEffect, useState } from "preact/hooks";
import { describe, json, type TokenInfo } from "../api";

const SCOPES = ["encrypt", "decrypt", "rewrap", "hmac", "verify", "admin"] as const;

function seconds(text: string): number | undefined {
  return text.trim() === "" ? undefined : Number(text);
}

function CreateToken({ onCreated }: { onCreated: () => void }) {
  const [scopes, setScopes] = useState<string[]>(["encrypt", "decrypt"]);
  const [patterns, setPatterns] = useState("*");
  const [description, setDescription] = useState("");
  const [ttl, setTtl] = useState("");
  const [maxTtl, setMaxTtl] = useState("");
  const [secret, setSecret] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const toggle = (scope: string, on: boolean): void =>
    setScopes(on ? [...scopes, scope] : scopes.filter((kept) => kept !== scope));
  const submit = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    setSecret(null);
    const body: Record<string, unknown> = {
      scopes,
      key_patterns: patterns.split(",").map((pattern) => pattern.trim()).filter((pattern) => pattern !== ""),
      description,
    };
    if (seconds(ttl) !== undefined) body["ttl"] = seconds(ttl);
    if (seconds(maxTtl) !== undefined) body["max_ttl"] = seconds(maxTtl);
    try {
      const created = await json<TokenInfo & { token: string }>("POST", "/v1/tokens", body);
      setSecret(created.token);
      onCreated();
    } catch (caught) {
      setError(describe(caught));
    }
  };
  return (
    <form id="create-token" onSubmit={submit}>
      <h2>Create a token</h2>
      <fieldset>
        <legend>Scopes</legend>
        {SCOPES.map((scope) => (
          <label class="inline">
            <input
              type="checkbox"
              name="scope"
              value={scope}
              checked={scopes.includes(scope)}
              onChange={(event) => toggle(scope, event.currentTarget.checked)}
            />
            {scope}
          </label>
        ))}
      </fieldset>
      <label>
        Key patterns (comma-separated)
        <input id="token-patterns" value={patterns} onInput={(event) => setPatterns(event.currentTarget.value)} />
      </label>
      <label>
        Description
        <input
          id="token-description"
          maxLength={256}
          value={description}
          onInput={(event) => setDescription(event.currentTarget.value)}
        />
      </label>
      <label>
        TTL (seconds, empty: none)
        <input id="token-ttl" type="number" min="1" value={ttl} onInput={(event) => setTtl(event.currentTarget.value)} />
      </label>
      <label>
        Max TTL (seconds, empty: none)
        <input
          id="token-max-ttl"
          type="number"
          min="1"
          value={maxTtl}
          onInput={(event) => setMaxTtl(event.currentTarget.value)}
        />
      </label>
      <button type="submit">Create</button>
      {error !== null && <p role="alert">{error}</p>}
      {secret !== null && (
        <div class="secret">
          <p>The token, shown this once: copy it now.</p>
          <code id="new-token">{secret}</code>
          <button type="button" onClick={() => void navigator.clipboard.writeText(secret)}>
            Copy token
          </button>
          <button type="button" onClick={() => setSecret(null)}>
            Done
          </button>
        </div>
      )}
    </form>
  );
}

export function TokensView() {
  const [tokens, setTokens] = useState<TokenInfo[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const load = (): void => {
    json<{ tokens: TokenInfo[] }>("GET", "/v1/tokens").then(
      (body) => setTokens(body.tokens),
      (caught) => setError(describe(caught)),
    );
  };
  useEffect(load, []);
  const revoke = async (id: string): Promise<void> => {
    setError(null);
    try {
      await json<null>("DELETE", `/v1/tokens/${encodeURIComponent(id)}`);
      load();
    } catch (caught) {
      setError(describe(caught));
    }
  };
  return (
    <section>
      <h1>Tokens</h1>
      {error !== null && <p role="alert">{error}</p>}
      <table id="tokens">
        <thead>
          <tr>
            <th>Id</th>
            <th>Scopes</th>
            <th>Key patterns</th>
            <th>Description</th>
            <th>Expires</th>
            <th>Action</th>
          </tr>
        </thead>
        <tbody>
          {(tokens ?? []).map((token) => (
            <tr data-token-id={token.id}>
              <td>{token.id}</td>
              <td>{token.scopes.join(", ")}</td>
              <td>{token.key_patterns.join(", ")}</td>
              <td>{token.description}</td>
              <td>{token.expires_at ?? "never"}</td>
              <td>
                <button type="button" onClick={() => void revoke(token.id)}>
                  Revoke
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <CreateToken onCreated={load} />
    </section>
  );
}
