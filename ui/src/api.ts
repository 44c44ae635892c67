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

async function failure(response: Response): Promise<ApiError> {
  let code = `http_${response.status}`;
  let message = response.statusText || `HTTP ${response.status}`;
  try {
    const body: unknown = await response.json();
    const error = (body as { error?: { code?: unknown; message?: unknown } }).error;
    if (typeof error?.code === "string") code = error.code;
    if (typeof error?.message === "string") message = error.message;
  } catch {
    // Not JSON (a proxy's page): the status line says what happened.
  }
  return new ApiError(response.status, code, message);
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
