// Sign in with a Keystream token: checked against GET /v1/tokens/self before it is kept for the tab.
import { useState } from "preact/hooks";
import { describe, json, session, type TokenInfo } from "../api";

export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | null>(null);
  const submit = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    session.signIn(token.trim());
    try {
      await json<TokenInfo>("GET", "/v1/tokens/self");
      setToken("");
      onSignedIn();
    } catch (caught) {
      session.signOut();
      setError(describe(caught));
    }
  };
  return (
    <main class="sign-in">
      <h1>Keystream console</h1>
      <form onSubmit={submit}>
        <label>
          Token
          <input
            id="token"
            type="password"
            autocomplete="off"
            required
            value={token}
            onInput={(event) => setToken(event.currentTarget.value)}
          />
        </label>
        <button type="submit">Sign in</button>
      </form>
      {error !== null && <p role="alert">{error}</p>}
      <p class="hint">The token stays in this tab only and is sent only in the Authorization header.</p>
    </main>
  );
}
