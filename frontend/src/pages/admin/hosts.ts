// The admin Hosts page's pure logic: the inventory merged with the live state, labels typed as
// text, and what a check's answer lets the admin do next.
import type { HostCheck, HostRecord, NewHost } from '../../api/inventory'
import type { HostState } from './admin'

/** One row of the page: what the inventory says and what the monitor last saw. Either may be
 *  missing: a host just added is not polled yet; a live host may have left the inventory. */
export interface HostRow {
  name: string
  record: HostRecord | null
  state: HostState | null
}

/** Inventory and live hosts by name, sorted naturally (sim-2 before sim-10). */
export function mergeHosts(records: readonly HostRecord[], states: readonly HostState[]): HostRow[] {
  const rows = new Map<string, HostRow>()
  for (const record of records) rows.set(record.name, { name: record.name, record, state: null })
  for (const state of states) {
    const row = rows.get(state.name)
    if (row) row.state = state
    else rows.set(state.name, { name: state.name, record: null, state })
  }
  return [...rows.values()].sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }))
}

/** "gpu-a100, lab-2 ml" → ["gpu-a100", "lab-2", "ml"]: comma or space separated, no repeats. */
export function parseLabels(text: string): string[] {
  const seen = new Set<string>()
  for (const part of text.split(/[\s,]+/)) if (part) seen.add(part)
  return [...seen]
}

/** "user@address:port". */
export function target(h: Pick<HostRecord, 'user' | 'address' | 'port'>): string {
  const address = h.address.includes(':') ? `[${h.address}]` : h.address
  return `${h.user ? `${h.user}@` : ''}${address}:${h.port}`
}

/** Whether a row can be edited or removed: not "local", this machine ([monitor] local_nvml), nor
 *  a host the monitor reports that the inventory does not list. A host of the config file can:
 *  it then stops following its [[hosts]] entry. */
export function editable(record: HostRecord | null): boolean {
  return record != null && record.source !== 'local'
}

export function sourceText(record: HostRecord | null): string {
  if (!record) return 'not in the inventory'
  return { config: 'config file', api: 'added or edited here', local: 'this machine' }[record.source] ?? record.source
}

/** What the dialog offers after a check. */
export interface Verdict {
  /** the button's words; null: adding is refused */
  action: string | null
  tone: 'ok' | 'warn' | 'danger'
  message: string
  /** the key to send as host_key when adding */
  trust: string | null
}

export function verdict(check: HostCheck): Verdict {
  const key = check.host_key
  if (key?.status === 'changed') {
    return {
      action: null,
      tone: 'danger',
      message:
        `The host answered with a different key (${key.fingerprint}) than the one trusted for it. ` +
        'This can mean the machine was reinstalled, or that someone is in between: it is not added. ' +
        'Remove the old key from known_hosts (or this host) once you know why it changed.',
      trust: null,
    }
  }
  if (key?.status === 'new') {
    return {
      action: 'Trust this key and add',
      tone: 'warn',
      message: `This key is not known yet. Compare its fingerprint ${key.fingerprint} with the one the host shows (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) before trusting it.`,
      trust: key.line,
    }
  }
  if (key?.status === 'trusted') {
    return { action: 'Add', tone: check.ok ? 'ok' : 'warn', message: `The key ${key.fingerprint} is already trusted.`, trust: null }
  }
  return {
    action: 'Add anyway',
    tone: 'warn',
    message: 'No host key was read, so none is trusted: the host shows as unreachable until it answers and its key is accepted.',
    trust: null,
  }
}

/** The form's fields, as typed. */
export interface HostForm {
  name: string
  address: string
  port: string
  user: string
  key_file: string
  labels: string
}

export function emptyForm(): HostForm {
  return { name: '', address: '', port: '22', user: '', key_file: '', labels: '' }
}

export function formOf(record: HostRecord): HostForm {
  return {
    name: record.name,
    address: record.address,
    port: String(record.port),
    user: record.user,
    key_file: record.key_file,
    labels: record.labels.join(', '),
  }
}

/** The host a form describes (the server validates it; an unreadable port is sent as typed). */
export function hostOf(form: HostForm): NewHost {
  const port = Number(form.port.trim())
  return {
    name: form.name.trim(),
    address: form.address.trim(),
    port: Number.isInteger(port) ? port : (form.port as unknown as number),
    user: form.user.trim(),
    key_file: form.key_file.trim(),
    labels: parseLabels(form.labels),
  }
}

/** The fields of `next` that differ from `record` (for PATCH). */
export function changes(record: HostRecord, next: NewHost): Partial<NewHost> {
  const out: Partial<NewHost> = {}
  if (next.address !== record.address) out.address = next.address
  if (next.port !== record.port) out.port = next.port
  if (next.user !== record.user) out.user = next.user
  if ((next.key_file ?? '') !== record.key_file) out.key_file = next.key_file
  const labels = next.labels ?? []
  if (labels.join('\n') !== record.labels.join('\n')) out.labels = labels
  return out
}

/** SHA256:… of an OpenSSH public key line, as `ssh-keygen -l` prints it; null if unreadable or
 *  the browser has no WebCrypto here (a page not served over https or from localhost). */
export async function fingerprint(line: string): Promise<string | null> {
  const blob = line.trim().split(/\s+/)[1]
  if (!blob || !globalThis.crypto?.subtle) return null
  try {
    const bytes = Uint8Array.from(atob(blob), (c) => c.charCodeAt(0))
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes))
    return `SHA256:${btoa(String.fromCharCode(...digest)).replace(/=+$/, '')}`
  } catch {
    return null
  }
}
