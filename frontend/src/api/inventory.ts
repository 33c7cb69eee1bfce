// The hosts Warden monitors, as the admin manages them (`/api/v1/inventory/hosts`): list, add,
// edit, remove, and check a host before trusting its key. Errors are ApiErrors like the typed
// client's, so <ErrorNotice> shows their reason.
import { authedFetch, ApiError, errorOf } from './client'

export type HostSource = 'config' | 'api' | 'local'
export type KeyStatus = 'trusted' | 'new' | 'changed'

/** A host in the inventory (services/shared/contracts/monitor.py HostRecord). */
export interface HostRecord {
  name: string
  address: string
  port: number
  user: string
  key_file: string
  probe: 'ssh' | 'nvml'
  labels: string[]
  /** the accepted public key line ("ssh-ed25519 AAAA..."); null: [ssh] known_hosts decides */
  host_key: string | null
  source: HostSource
}

/** The fields of a new host (the server fills in the rest). */
export interface NewHost {
  name: string
  address: string
  port?: number
  user: string
  key_file?: string
  probe?: 'ssh' | 'nvml'
  labels?: string[]
  host_key?: string | null
}

/** What connecting to a host found. */
export interface HostCheck {
  ok: boolean
  detail: string
  host_key: { line: string; fingerprint: string; status: KeyStatus } | null
  gpus: { index: number; name: string | null; uuid: string }[]
}

const BASE = '/api/v1/inventory/hosts'

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method }
  if (body !== undefined) {
    init.body = JSON.stringify(body)
    init.headers = { 'Content-Type': 'application/json' }
  }
  let response: Response
  try {
    response = await authedFetch(new Request(path, init))
  } catch (err) {
    throw new ApiError(0, 'network', `The server cannot be reached (${(err as Error).message})`)
  }
  const text = await response.text()
  let parsed: unknown = null
  try {
    parsed = text ? JSON.parse(text) : null
  } catch {
    parsed = null
  }
  if (!response.ok) throw errorOf(response, parsed)
  return parsed as T
}

const one = (name: string) => `${BASE}/${encodeURIComponent(name)}`

export const inventory = {
  list: () => call<{ hosts: HostRecord[] }>('GET', BASE).then((a) => a.hosts),
  add: (host: NewHost) => call<HostRecord>('POST', BASE, host),
  update: (name: string, changes: Partial<Omit<HostRecord, 'name' | 'source'>>) => call<HostRecord>('PATCH', one(name), changes),
  remove: (name: string) => call<HostRecord>('DELETE', one(name)),
  /** Check a host that is not in the inventory yet. */
  checkCandidate: (candidate: Partial<NewHost>) => call<HostCheck>('POST', `${BASE}/check`, candidate),
  /** Check an inventory host, with `overrides` in place of its stored fields. */
  check: (name: string, overrides: Partial<NewHost> = {}) => call<HostCheck>('POST', `${one(name)}/check`, overrides),
}
