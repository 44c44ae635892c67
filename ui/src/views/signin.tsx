// Sign in with a Keystream token (checked against GET /v1/tokens/self before it is kept for the tab), or
// with a JWT through a login role (POST /v1/auth/jwt/login, no token needed): the token the service issues
// is then kept exactly like a pasted one. The JWT itself is sent once and kept nowhere.
import { useState } from "preact/hooks";
import { describe, json, session, type TokenInfo } from "../api";

/** What the JWT login answers that the page uses: the new token's secret (shown this once). */
interface LoginAnswer {
  token: string;
}

function TokenForm({ onSignedIn }: { onSignedIn: () => void }) {
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
    <form id="token-sign-in" onSubmit={submit} aria-labelledby="token-sign-in-heading">
      <h2 id="token-sign-in-heading">With a token</h2>
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
      {error !== null && <p role="alert">{error}</p>}
    </form>
  );
}

function JwtForm({ onSignedIn }: { onSignedIn: () => void }) {
  const [role, setRole] = useState("");
  const [jwt, setJwt] = useState("");
  const [error, setError] = useState<string | null>(null);
  const submit = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    const body = { role: role.trim(), jwt: jwt.trim() };
    setJwt(""); // the JWT is a credential too: out of the page whatever the answer
    try {
      session.signOut(); // the login is made without a token
      const answer = await json<LoginAnswer>("POST", "/v1/auth/jwt/login", body);
      session.signIn(answer.token);
      onSignedIn();
    } catch (caught) {
      setError(describe(caught));
    }
  };
  return (
    <form id="jwt-sign-in" onSubmit={submit} aria-labelledby="jwt-sign-in-heading">
      <h2 id="jwt-sign-in-heading">With a JWT, through a login role</h2>
      <label>
        Role
        <input id="jwt-role" autocomplete="off" required value={role} onInput={(event) => setRole(event.currentTarget.value)} />
      </label>
      <label>
        JWT
        <input
          id="jwt"
          type="password"
          autocomplete="off"
          required
          value={jwt}
          onInput={(event) => setJwt(event.currentTarget.value)}
        />
      </label>
      <button type="submit">Sign in with the JWT</button>
      {error !== null && (
        <p role="alert" id="jwt-error">
          {error}
        </p>
      )}
    </form>
  );
}

export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  return (
    <main class="sign-in">
      <h1>Keystream console</h1>
      <TokenForm onSignedIn={onSignedIn} />
      <JwtForm onSignedIn={onSignedIn} />
      <p class="hint">
        The token, pasted or issued for the JWT, stays in this tab only and is sent only in the Authorization
        header; the JWT is sent once and not kept.
      </p>
    </main>
  );
}
