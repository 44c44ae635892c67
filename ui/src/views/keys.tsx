// Keys: the list (filtered by name), creation (type, scheme, segment size), and one key's page with its
// versions and rotation.
import { useEffect, useState } from "preact/hooks";
import { describe, json, keyPath, type KeyInfo } from "../api";

const TYPES = ["aes256", "aes192", "aes128"] as const;
const SCHEMES = ["ctr-hmac", "gcm"] as const;
const DEFAULT_SEGMENT_SIZE = 1 << 20;

function CreateKey({ onCreated }: { onCreated: () => void }) {
  const [name, setName] = useState("");
  const [type, setType] = useState<string>(TYPES[0]);
  const [scheme, setScheme] = useState<string>(SCHEMES[0]);
  const [segmentSize, setSegmentSize] = useState(String(DEFAULT_SEGMENT_SIZE));
  const [error, setError] = useState<string | null>(null);
  const submit = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    try {
      await json<KeyInfo>("POST", "/v1/keys", { name, type, scheme, segment_size: Number(segmentSize) });
      setName("");
      onCreated();
    } catch (caught) {
      setError(describe(caught));
    }
  };
  return (
    <form id="create-key" onSubmit={submit}>
      <h2>Create a key</h2>
      <label>
        Name
        <input id="key-name" required value={name} onInput={(event) => setName(event.currentTarget.value)} />
      </label>
      <label>
        Type
        <select id="key-type" value={type} onChange={(event) => setType(event.currentTarget.value)}>
          {TYPES.map((option) => (
            <option value={option}>{option}</option>
          ))}
        </select>
      </label>
      <label>
        Scheme
        <select id="key-scheme" value={scheme} onChange={(event) => setScheme(event.currentTarget.value)}>
          {SCHEMES.map((option) => (
            <option value={option}>{option}</option>
          ))}
        </select>
      </label>
      <label>
        Segment size (bytes)
        <input
          id="key-segment-size"
          type="number"
          min="4096"
          value={segmentSize}
          onInput={(event) => setSegmentSize(event.currentTarget.value)}
        />
      </label>
      <button type="submit">Create</button>
      {error !== null && <p role="alert">{error}</p>}
    </form>
  );
}

export function KeysView() {
  const [keys, setKeys] = useState<KeyInfo[] | null>(null);
  const [filter, setFilter] = useState("");
  const [error, setError] = useState<string | null>(null);
  const load = (): void => {
    json<{ keys: KeyInfo[] }>("GET", "/v1/keys").then(
      (body) => setKeys(body.keys),
      (caught) => setError(describe(caught)),
    );
  };
  useEffect(load, []);
  const shown = (keys ?? []).filter((key) => key.name.includes(filter));
  return (
    <section>
      <h1>Keys</h1>
      <label>
        Filter
        <input id="key-filter" type="search" value={filter} onInput={(event) => setFilter(event.currentTarget.value)} />
      </label>
      {error !== null && <p role="alert">{error}</p>}
      <table id="keys">
        <thead>
          <tr>
            <th>Name</th>
            <th>Type</th>
            <th>Scheme</th>
            <th>Segment size</th>
            <th>Latest version</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((key) => (
            <tr>
              <td>
                <a href={`#/keys/${encodeURIComponent(key.name)}`}>{key.name}</a>
              </td>
              <td>{key.type}</td>
              <td>{key.scheme}</td>
              <td>{key.segment_size}</td>
              <td>{key.latest_version}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {keys !== null && shown.length === 0 && <p>No key matches.</p>}
      <CreateKey onCreated={load} />
    </section>
  );
}

export function KeyView({ name }: { name: string }) {
  const [key, setKey] = useState<KeyInfo | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    json<KeyInfo>("GET", keyPath(name)).then(setKey, (caught) => setError(describe(caught)));
  }, [name]);
  const rotate = async (): Promise<void> => {
    setError(null);
    try {
      setKey(await json<KeyInfo>("POST", keyPath(name, "rotate")));
    } catch (caught) {
      setError(describe(caught));
    }
  };
  return (
    <section>
      <p>
        <a href="#/keys">All keys</a>
      </p>
      <h1>{name}</h1>
      {error !== null && <p role="alert">{error}</p>}
      {key !== null && (
        <>
          <dl>
            <dt>Type</dt>
            <dd>{key.type}</dd>
            <dt>Scheme</dt>
            <dd>{key.scheme}</dd>
            <dt>Segment size</dt>
            <dd>{key.segment_size} bytes</dd>
            <dt>Latest version</dt>
            <dd id="latest-version">{key.latest_version}</dd>
            <dt>Oldest version that decrypts</dt>
            <dd>{key.min_decryption_version}</dd>
          </dl>
          <button type="button" id="rotate" onClick={rotate}>
            Rotate
          </button>
          <h2>Versions</h2>
          <table id="versions">
            <thead>
              <tr>
                <th>Version</th>
                <th>Created</th>
              </tr>
            </thead>
            <tbody>
              {(key.versions ?? []).map((version) => (
                <tr>
                  <td>{version.version}</td>
                  <td>{version.created_at}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}
