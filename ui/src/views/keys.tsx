// Keys: the list (filtered by name), creation (type; scheme and segment size for the sealed format's types,
// none for aes256-siv, whose deterministic encryption has neither), and one key's page with its
// versions, rotation, the oldest version that decrypts, trim, import of a version and deletion.
import { useEffect, useState } from "preact/hooks";
import { describe, json, keyPath, type KeyInfo } from "../api";

const TYPES = ["aes256", "aes192", "aes128", "aes256-siv"] as const;
/** The deterministic type (AES-SIV, used through the batch routes): no scheme or segment size. */
const DETERMINISTIC = "aes256-siv";
const SCHEMES = ["ctr-hmac", "gcm"] as const;
const DEFAULT_SEGMENT_SIZE = 1 << 20;

function CreateKey({ onCreated }: { onCreated: () => void }) {
  const [name, setName] = useState("");
  const [type, setType] = useState<string>(TYPES[0]);
  const [scheme, setScheme] = useState<string>(SCHEMES[0]);
  const [segmentSize, setSegmentSize] = useState(String(DEFAULT_SEGMENT_SIZE));
  const [deletionAllowed, setDeletionAllowed] = useState(false);
  const [autoRotate, setAutoRotate] = useState("");
  const [error, setError] = useState<string | null>(null);
  const submit = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    try {
      const sealed = type === DETERMINISTIC ? {} : { scheme, segment_size: Number(segmentSize) };
      await json<KeyInfo>("POST", "/v1/keys", {
        name,
        type,
        ...sealed,
        deletion_allowed: deletionAllowed,
        // A number of seconds or a duration such as "24h" (the service parses it); empty: off.
        auto_rotate_period: autoRotate.trim() === "" ? 0 : /^\d+$/.test(autoRotate.trim()) ? Number(autoRotate) : autoRotate.trim(),
      });
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
        <select
          id="key-scheme"
          value={scheme}
          disabled={type === DETERMINISTIC}
          onChange={(event) => setScheme(event.currentTarget.value)}
        >
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
          disabled={type === DETERMINISTIC}
          onInput={(event) => setSegmentSize(event.currentTarget.value)}
        />
      </label>
      <label>
        Automatic rotation period (seconds or e.g. 24h; empty: off)
        <input id="key-auto-rotate" value={autoRotate} onInput={(event) => setAutoRotate(event.currentTarget.value)} />
      </label>
      <label class="inline">
        <input
          id="key-deletion-allowed"
          type="checkbox"
          checked={deletionAllowed}
          onChange={(event) => setDeletionAllowed(event.currentTarget.checked)}
        />
        Deletion allowed
      </label>
      <button type="submit">Create</button>
      {error !== null && <p role="alert">{error}</p>}
    </form>
  );
}

/** Delete a key once its name is typed again (deletion must be allowed on the key). */
function DeleteKey({ name }: { name: string }) {
  const [typed, setTyped] = useState("");
  const [error, setError] = useState<string | null>(null);
  const remove = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    try {
      await json<null>("DELETE", keyPath(name));
      window.location.hash = "#/keys";
    } catch (caught) {
      setError(describe(caught));
    }
  };
  return (
    <form id="delete-key" onSubmit={remove}>
      <h2>Delete</h2>
      <label>
        Type the key's name to delete it and every version (what it encrypted can no longer be decrypted)
        <input id="delete-confirm" autocomplete="off" value={typed} onInput={(event) => setTyped(event.currentTarget.value)} />
      </label>
      <button type="submit" disabled={typed !== name}>
        Delete key
      </button>
      {error !== null && <p role="alert">{error}</p>}
    </form>
  );
}

/**
 * Delete the versions below a number for good (trim). Only versions that no longer decrypt may go, so the
 * number runs from the oldest stored version + 1 to the oldest version that decrypts; a checkbox confirms.
 */
function TrimVersions({ info, onChanged }: { info: KeyInfo; onChanged: (key: KeyInfo) => void }) {
  const oldest = Math.min(...(info.versions ?? []).map((version) => version.version), info.latest_version);
  const [minimum, setMinimum] = useState("");
  const [confirmed, setConfirmed] = useState(false);
  const [error, setError] = useState<string | null>(null);
  if (oldest >= info.min_decryption_version) {
    return (
      <p id="trim-nothing">
        Nothing to trim: every stored version still decrypts (raise the oldest version that decrypts first).
      </p>
    );
  }
  const trim = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    try {
      onChanged(await json<KeyInfo>("POST", keyPath(info.name, "trim"), { min_available_version: Number(minimum) }));
      setMinimum("");
      setConfirmed(false);
    } catch (caught) {
      setError(describe(caught));
    }
  };
  return (
    <form id="trim" onSubmit={trim}>
      <h2>Trim</h2>
      <label>
        Delete every version below (versions {oldest} to {info.min_decryption_version - 1} no longer decrypt)
        <input
          id="trim-input"
          type="number"
          min={oldest + 1}
          max={info.min_decryption_version}
          required
          value={minimum}
          onInput={(event) => setMinimum(event.currentTarget.value)}
        />
      </label>
      <label class="inline">
        <input
          id="trim-confirm"
          type="checkbox"
          checked={confirmed}
          onChange={(event) => setConfirmed(event.currentTarget.checked)}
        />
        Delete them for good: what they encrypted can never be decrypted again
      </label>
      <button type="submit" disabled={!confirmed}>
        Trim
      </button>
      {error !== null && <p role="alert">{error}</p>}
    </form>
  );
}

/** The material's length in bytes for each key type (what import_version accepts). */
const MATERIAL_BYTES: Record<string, number> = { aes128: 16, aes192: 24, aes256: 32, "aes256-siv": 64 };

/**
 * Add a version with material brought from elsewhere (import_version). The material is a secret: typed into
 * a password field, sent once in the JSON body, and cleared from the page whatever the answer. The service
 * refuses when key import is off (KEYSTREAM_ALLOW_KEY_IMPORT), in its own words.
 */
function ImportVersion({ info, onChanged }: { info: KeyInfo; onChanged: (key: KeyInfo) => void }) {
  const [material, setMaterial] = useState("");
  const [error, setError] = useState<string | null>(null);
  const submit = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    const body = { key: material.trim() };
    setMaterial("");
    try {
      onChanged(await json<KeyInfo>("POST", keyPath(info.name, "import_version"), body));
    } catch (caught) {
      setError(describe(caught));
    }
  };
  const length = MATERIAL_BYTES[info.type];
  return (
    <form id="import-version" onSubmit={submit}>
      <h2>Import a version</h2>
      <label>
        Material: base64 of {length === undefined ? "the key type's" : length} random bytes (becomes version{" "}
        {info.latest_version + 1}; needs key import enabled on the service)
        <input
          id="import-material"
          type="password"
          autocomplete="off"
          required
          value={material}
          onInput={(event) => setMaterial(event.currentTarget.value)}
        />
      </label>
      <button type="submit">Import version</button>
      {error !== null && (
        <p role="alert" id="import-error">
          {error}
        </p>
      )}
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
  const [minimum, setMinimum] = useState("");
  const rotate = async (): Promise<void> => {
    setError(null);
    try {
      setKey(await json<KeyInfo>("POST", keyPath(name, "rotate")));
    } catch (caught) {
      setError(describe(caught));
    }
  };
  const setMinimumVersion = async (event: Event): Promise<void> => {
    event.preventDefault();
    setError(null);
    try {
      setKey(await json<KeyInfo>("PATCH", keyPath(name), { min_decryption_version: Number(minimum) }));
      setMinimum("");
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
            <dd id="min-decryption-version">{key.min_decryption_version}</dd>
            <dt>Automatic rotation</dt>
            <dd>{key.auto_rotate_period > 0 ? `every ${key.auto_rotate_period} s` : "off"}</dd>
            <dt>Deletion</dt>
            <dd>{key.deletion_allowed ? "allowed" : "not allowed"}</dd>
            <dt>Imported material</dt>
            <dd id="key-imported">{key.imported ? "yes (some version came from outside the service)" : "no"}</dd>
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
          <form id="min-version" onSubmit={setMinimumVersion}>
            <label>
              Oldest version that decrypts
              <input
                id="min-version-input"
                type="number"
                min="1"
                max={key.latest_version}
                required
                value={minimum}
                onInput={(event) => setMinimum(event.currentTarget.value)}
              />
            </label>
            <button type="submit">Set</button>
          </form>
          <TrimVersions info={key} onChanged={setKey} />
          <ImportVersion info={key} onChanged={setKey} />
          {key.deletion_allowed && <DeleteKey name={name} />}
        </>
      )}
    </section>
  );
}
