// Encrypt and decrypt text or a file with a key: the sealed bytes go through the streaming routes, so the
// result is the same sealed format the CLI and Tink read; text's ciphertext is shown as base64 with a copy
// button, a file's is offered as a download.
import { useState } from "preact/hooks";
import { bytes, describe, fromBase64, keyPath, toBase64 } from "../api";
import { FileCrypto } from "./files";

export function CryptoView() {
  const [key, setKey] = useState("");
  const [plaintext, setPlaintext] = useState("");
  const [ciphertext, setCiphertext] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [copied, setCopied] = useState(false);
  const run = async (operation: "encrypt" | "decrypt"): Promise<void> => {
    setError(null);
    setCopied(false);
    try {
      if (operation === "encrypt") {
        const sealed = await bytes(keyPath(key, "encrypt"), new TextEncoder().encode(plaintext));
        setCiphertext(toBase64(sealed));
      } else {
        const opened = await bytes(keyPath(key, "decrypt"), fromBase64(ciphertext));
        setPlaintext(new TextDecoder("utf-8", { fatal: false }).decode(opened));
      }
    } catch (caught) {
      setError(describe(caught));
    }
  };
  const copy = async (): Promise<void> => {
    try {
      await navigator.clipboard.writeText(ciphertext);
      setCopied(true);
    } catch (caught) {
      setError(`copy refused by the browser: ${describe(caught)}`);
    }
  };
  return (
    <section>
      <h1>Encrypt / decrypt</h1>
      <label>
        Key
        <input id="crypto-key" required value={key} onInput={(event) => setKey(event.currentTarget.value)} />
      </label>
      <h2>Text</h2>
      <label>
        Plaintext
        <textarea id="plaintext" rows={5} value={plaintext} onInput={(event) => setPlaintext(event.currentTarget.value)} />
      </label>
      <div class="actions">
        <button type="button" id="encrypt" disabled={key === ""} onClick={() => void run("encrypt")}>
          Encrypt
        </button>
        <button type="button" id="decrypt" disabled={key === ""} onClick={() => void run("decrypt")}>
          Decrypt
        </button>
      </div>
      <label>
        Ciphertext (base64, sealed format)
        <textarea
          id="ciphertext"
          rows={5}
          value={ciphertext}
          onInput={(event) => setCiphertext(event.currentTarget.value)}
        />
      </label>
      <button type="button" id="copy" disabled={ciphertext === ""} onClick={() => void copy()}>
        {copied ? "Copied" : "Copy ciphertext"}
      </button>
      {error !== null && (
        <p role="alert" id="crypto-error">
          {error}
        </p>
      )}
      <FileCrypto keyName={key} />
    </section>
  );
}
