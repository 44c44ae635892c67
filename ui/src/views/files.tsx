// Encrypt or decrypt a file chosen from disk: the file goes to the streaming routes as it is (never read
// into the page's memory as a copy), with a progress bar, and the answer is offered as a download from a
// Blob URL the page made (the file never leaves the browser for any other host).
import { useEffect, useState } from "preact/hooks";
import { describe, keyPath, MAX_FILE_BYTES, sendFile, type Progress } from "../api";

/** The CLI's suffix for sealed files (`keystream encrypt report.pdf report.pdf.ks`). */
const SEALED_SUFFIX = ".ks";

/** Bytes in MiB with two decimals, for the progress text. */
export function mebibytes(count: number): string {
  return `${(count / (1024 * 1024)).toFixed(2)} MiB`;
}

/** The download's name: `name.ks` for encrypt; for decrypt `name` without `.ks`, or `name.out`. */
function resultName(file: string, operation: "encrypt" | "decrypt"): string {
  if (operation === "encrypt") return `${file}${SEALED_SUFFIX}`;
  return file.endsWith(SEALED_SUFFIX) && file.length > SEALED_SUFFIX.length
    ? file.slice(0, -SEALED_SUFFIX.length)
    : `${file}.out`;
}

interface Result {
  url: string;
  name: string;
  size: number;
}

function ProgressBar({ progress }: { progress: Progress }) {
  const receiving = progress.received > 0 || (progress.total > 0 && progress.sent >= progress.total);
  if (!receiving) {
    return (
      <label>
        Sending: {mebibytes(progress.sent)} of {mebibytes(progress.total)}
        <progress id="file-progress" max={Math.max(progress.total, 1)} value={progress.sent} />
      </label>
    );
  }
  // A streamed answer declares no length: the bar is then indeterminate and the text counts the bytes.
  return (
    <label>
      Receiving: {mebibytes(progress.received)}
      {progress.expected !== null && ` of ${mebibytes(progress.expected)}`}
      {progress.expected !== null ? (
        <progress id="file-progress" max={Math.max(progress.expected, 1)} value={progress.received} />
      ) : (
        <progress id="file-progress" />
      )}
    </label>
  );
}

export function FileCrypto({ keyName }: { keyName: string }) {
  const [file, setFile] = useState<File | null>(null);
  const [progress, setProgress] = useState<Progress | null>(null);
  const [result, setResult] = useState<Result | null>(null);
  const [error, setError] = useState<string | null>(null);
  // A Blob URL holds its bytes until revoked: the previous result's is revoked when it is replaced or the
  // view closes.
  useEffect(() => () => {
    if (result !== null) URL.revokeObjectURL(result.url);
  }, [result]);
  const busy = progress !== null;
  const tooLarge = file !== null && file.size > MAX_FILE_BYTES;
  const run = async (operation: "encrypt" | "decrypt"): Promise<void> => {
    if (file === null) return;
    setError(null);
    setResult(null);
    setProgress({ sent: 0, total: file.size, received: 0, expected: null });
    try {
      const answer = await sendFile(keyPath(keyName, operation), file, setProgress);
      setResult({ url: URL.createObjectURL(answer), name: resultName(file.name, operation), size: answer.size });
    } catch (caught) {
      setError(describe(caught));
    } finally {
      setProgress(null);
    }
  };
  return (
    <section aria-labelledby="file-heading">
      <h2 id="file-heading">File</h2>
      <label>
        File (up to {mebibytes(MAX_FILE_BYTES)}; larger files: <code>keystream encrypt</code> or{" "}
        <code>keystream decrypt</code>)
        <input
          id="file-input"
          type="file"
          disabled={busy}
          onChange={(event) => {
            setResult(null);
            setError(null);
            setFile(event.currentTarget.files?.[0] ?? null);
          }}
        />
      </label>
      {tooLarge && (
        <p role="alert" id="file-too-large">
          {file.name} is {mebibytes(file.size)}: the console sends at most {mebibytes(MAX_FILE_BYTES)} (a browser
          sends the whole file before it reads the answer). Use the CLI for this file.
        </p>
      )}
      <div class="actions">
        <button
          type="button"
          id="encrypt-file"
          disabled={keyName === "" || file === null || tooLarge || busy}
          onClick={() => void run("encrypt")}
        >
          Encrypt file
        </button>
        <button
          type="button"
          id="decrypt-file"
          disabled={keyName === "" || file === null || tooLarge || busy}
          onClick={() => void run("decrypt")}
        >
          Decrypt file
        </button>
      </div>
      {progress !== null && <ProgressBar progress={progress} />}
      {result !== null && (
        <p>
          <a id="file-download" href={result.url} download={result.name}>
            Save {result.name}
          </a>{" "}
          ({mebibytes(result.size)})
        </p>
      )}
      {error !== null && (
        <p role="alert" id="file-error">
          {error}
        </p>
      )}
    </section>
  );
}
