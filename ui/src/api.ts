// The console's only way to the service: its public HTTP API on this origin, with the signed-in token in
// the Authorization header and nowhere else (never a URL, a cookie or localStorage).

const TOKEN_KEY = "keystream.token";

/** An answer of the service that was not a success, with the service's own words. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The token of this tab: sessionStorage, so a reload keeps it and closing the tab forgets it. */
export const session = {
  token(): string | null {
    return window.sessionStorage.getItem(TOKEN_KEY);
  },
  signIn(token: string): void {
    window.sessionStorage.setItem(TOKEN_KEY, token);
  },
  signOut(): void {
    window.sessionStorage.removeItem(TOKEN_KEY);
  },
};

/** The service's JSON error (`{"error": {"code", "message"}}`) in a body's text, else the status line. */
function failureOf(status: number, statusText: string, text: string): ApiError {
  let code = `http_${status}`;
  let message = statusText || `HTTP ${status}`;
  try {
    const body: unknown = JSON.parse(text);
    const error = (body as { error?: { code?: unknown; message?: unknown } }).error;
    if (typeof error?.code === "string") code = error.code;
    if (typeof error?.message === "string") message = error.message;
  } catch {
    // Not JSON (a proxy's page): the status line says what happened.
  }
  return new ApiError(status, code, message);
}

async function failure(response: Response): Promise<ApiError> {
  let text = "";
  try {
    text = await response.text();
  } catch {
    // The body was cut off: the status line is all there is.
  }
  return failureOf(response.status, response.statusText, text);
}

async function send(method: string, path: string, body?: BodyInit, type?: string): Promise<Response> {
  const headers: Record<string, string> = {};
  const token = session.token();
  if (token !== null) headers["Authorization"] = `Bearer ${token}`;
  if (type !== undefined) headers["Content-Type"] = type;
  const init: RequestInit = { method, headers, credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer" };
  if (body !== undefined) init.body = body;
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  return response;
}

/** A JSON request; `null` for a 204. */
export async function json<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response =
    body === undefined
      ? await send(method, path)
      : await send(method, path, JSON.stringify(body), "application/json");
  return (response.status === 204 ? null : await response.json()) as T;
}

/** Bytes in, bytes out: the streaming encrypt and decrypt routes. */
export async function bytes(path: string, data: Uint8Array): Promise<Uint8Array> {
  const response = await send("POST", path, data as Uint8Array<ArrayBuffer>, "application/octet-stream");
  return new Uint8Array(await response.arrayBuffer());
}

/**
 * The largest file the console sends. A browser sends a whole request body before it reads any of the answer
 * (it is a half-duplex HTTP/1.1 client), while the service answers as it reads and stops reading when its
 * answer is not read: a body larger than the socket buffers on both sides and the service's pipeline can
 * hold stalls. An encrypt of 12 MiB went through and one of 16 MiB stalled here (Linux loopback, 1 MiB and
 * 4 KiB segments; decrypt has more room); 8 MiB keeps a margin. Larger files go through the CLI, which reads
 * while it sends.
 */
export const MAX_FILE_BYTES = 8 * 1024 * 1024;
/** A transfer with no progress for this long has stalled (see MAX_FILE_BYTES) and is given up. */
export const STALL_MILLISECONDS = 15_000;

/** How far a file transfer is: bytes sent of the body, then bytes of the answer received. */
export interface Progress {
  sent: number;
  total: number;
  received: number;
  /** The answer's length when the service declared one, else null. */
  expected: number | null;
}

/**
 * POST a file to a streaming route and resolve to the answer's bytes, reporting progress as it goes.
 * XMLHttpRequest rather than fetch: fetch reports no upload progress. Rejects with the service's error
 * (ApiError), or an Error in words when the connection drops (the service aborts a decrypt whose later
 * segment fails to verify) or the transfer stalls.
 */
export function sendFile(path: string, file: Blob, onProgress: (progress: Progress) => void): Promise<Blob> {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    const progress: Progress = { sent: 0, total: file.size, received: 0, expected: null };
    let stalled = false;
    let watchdog = 0;
    const moved = (): void => {
      window.clearTimeout(watchdog);
      watchdog = window.setTimeout(() => {
        stalled = true;
        request.abort();
      }, STALL_MILLISECONDS);
      onProgress({ ...progress });
    };
    request.open("POST", path);
    const token = session.token();
    if (token !== null) request.setRequestHeader("Authorization", `Bearer ${token}`);
    request.setRequestHeader("Content-Type", "application/octet-stream");
    request.responseType = "blob";
    request.withCredentials = false;
    request.upload.onprogress = (event) => {
      progress.sent = event.loaded;
      moved();
    };
    request.onprogress = (event) => {
      progress.sent = progress.total;
      progress.received = event.loaded;
      progress.expected = event.lengthComputable ? event.total : null;
      moved();
    };
    request.onload = () => {
      window.clearTimeout(watchdog);
      const answer = request.response as Blob;
      if (request.status >= 200 && request.status < 300) {
        resolve(answer);
        return;
      }
      answer.text().then(
        (text) => reject(failureOf(request.status, request.statusText, text)),
        () => reject(failureOf(request.status, request.statusText, "")),
      );
    };
    const dropped = (): void => {
      window.clearTimeout(watchdog);
      reject(
        new Error(
          stalled
            ? `the transfer stalled (nothing moved for ${STALL_MILLISECONDS / 1000} s) and was given up`
            : "the connection was cut before the answer was complete: the service stops a decrypt when a " +
                "later part of the file fails to verify (tampered or truncated), or the network dropped; " +
                "nothing was kept",
        ),
      );
    };
    request.onerror = dropped;
    request.onabort = dropped;
    moved();
    request.send(file);
  });
}

/** A key name as one path segment. */
export function keyPath(name: string, operation?: string): string {
  const base = `/v1/keys/${encodeURIComponent(name)}`;
  return operation === undefined ? base : `${base}/${operation}`;
}

export interface KeyVersion {
  version: number;
  created_at: string;
}

export interface KeyInfo {
  name: string;
  type: string;
  scheme: string;
  segment_size: number;
  deletion_allowed: boolean;
  min_decryption_version: number;
  latest_version: number;
  imported: boolean;
  auto_rotate_period: number;
  created_at: string;
  versions?: KeyVersion[];
}

export interface TokenInfo {
  id: string;
  scopes: string[];
  key_patterns: string[];
  description: string;
  created_at: string;
  ttl: number | null;
  expires_at: string | null;
  max_expires_at: string | null;
}

export interface AuditChainHead {
  file: string | null;
  head: string | null;
}

export interface AuditStatus {
  enabled: boolean;
  destination: "file" | "stdout" | null;
  heads: AuditChainHead[];
}

export interface SealStatus {
  sealed: boolean;
  type: string;
  threshold: number;
  shares: number;
  progress: number;
}

/** Base64 of bytes, in chunks (String.fromCharCode takes a bounded argument list). */
export function toBase64(data: Uint8Array): string {
  let text = "";
  for (let start = 0; start < data.length; start += 0x8000) {
    text += String.fromCharCode(...data.subarray(start, start + 0x8000));
  }
  return btoa(text);
}

/** Bytes of base64 text; whitespace is ignored. Throws a readable error on anything else. */
export function fromBase64(text: string): Uint8Array {
  let binary: string;
  try {
    binary = atob(text.replace(/\s+/g, ""));
  } catch {
    throw new Error("the ciphertext is not valid base64");
  }
  return Uint8Array.from(binary, (character) => character.charCodeAt(0));
}

/** The message of anything thrown, for the page. */
export function describe(error: unknown): string {
  if (error instanceof ApiError) return `${error.message} (${error.status} ${error.code})`;
  return error instanceof Error ? error.message : String(error);
}
