// The console's shell: sign-in, the navigation between views (the location's hash, which never holds the
// token), and sign-out, which forgets the token.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { session } from "./api";
import { AuditView } from "./views/audit";
import { CryptoView } from "./views/crypto";
import { DashboardView } from "./views/dashboard";
import { KeyView, KeysView } from "./views/keys";
import { SealView } from "./views/seal";
import { SignIn } from "./views/signin";
import { TokensView } from "./views/tokens";

const SECTIONS = [
  ["keys", "Keys"],
  ["crypto", "Encrypt / decrypt"],
  ["tokens", "Tokens"],
  ["audit", "Audit"],
  ["seal", "Seal status"],
  ["dashboard", "Dashboard"],
] as const;

function currentRoute(): string[] {
  const parts = window.location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  return parts[0] ? parts : ["keys"];
}

function View({ route }: { route: string[] }) {
  const [section, name] = route;
  switch (section) {
    case "keys":
      return name === undefined ? <KeysView /> : <KeyView name={name} />;
    case "crypto":
      return <CryptoView />;
    case "tokens":
      return <TokensView />;
    case "audit":
      return <AuditView />;
    case "seal":
      return <SealView />;
    case "dashboard":
      return <DashboardView />;
    default:
      return <p role="alert">No such page.</p>;
  }
}

function App() {
  const [signedIn, setSignedIn] = useState(session.token() !== null);
  const [route, setRoute] = useState(currentRoute());
  useEffect(() => {
    const follow = (): void => setRoute(currentRoute());
    window.addEventListener("hashchange", follow);
    return () => window.removeEventListener("hashchange", follow);
  }, []);
  if (!signedIn) return <SignIn onSignedIn={() => setSignedIn(true)} />;
  const signOut = (): void => {
    session.signOut();
    setSignedIn(false);
  };
  return (
    <div class="shell">
      <header>
        <strong>Keystream</strong>
        <nav>
          {SECTIONS.map(([id, label]) => (
            <a href={`#/${id}`} aria-current={route[0] === id ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <button type="button" id="sign-out" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main>
        <View route={route} />
      </main>
    </div>
  );
}

const root = document.getElementById("console");
if (root !== null) render(<App />, root);
