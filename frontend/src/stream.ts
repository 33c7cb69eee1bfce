// The live stream (`GET /api/v1/stream`, Server-Sent Events): one EventSource for the whole
// app; pages subscribe to event types. The browser resumes by itself with Last-Event-ID; when
// the gateway cannot replay what was missed it sends `reset` and pages reload their state.
// Resuming on another gateway replica sends some events again: each is handled once (event_id).
import { ref } from 'vue'
import { SeenEvents } from './seen'
import { session } from './session'

export interface StreamEvent<T = Record<string, unknown>> {
  id: string
  /** the event's own id, the same through every gateway replica */
  event_id?: string
  type: string
  occurred_at: string
  data: T
}

type Handler = (event: StreamEvent<any>) => void // eslint-disable-line @typescript-eslint/no-explicit-any

export const EVENT_TYPES = [
  'gpu.discovered',
  'gpu.disappeared',
  'gpu.health_changed',
  'host.sampled',
  'processes.observed',
  'host.unreachable',
  'host.recovered',
  'host.added',
  'host.updated',
  'host.removed',
  'host.topology_read',
  'reservation.created',
  'reservation.updated',
  'reservation.cancelled',
  'reservation.started',
  'reservation.ended',
  'reservation.released_idle',
  'access.changed',
  'user.created',
  'user.updated',
  'user.deleted',
  'job.created',
  'job.updated',
  'job.deleted',
  'job.status_changed',
  'task.status_changed',
  'queue.changed',
  'violation.opened',
  'violation.escalated',
  'violation.resolved',
  'notification.sent',
] as const

/** connecting, live, or offline (it keeps trying). */
export const streamStatus = ref<'connecting' | 'live' | 'offline'>('offline')

const handlers = new Map<string, Set<Handler>>()
const resetHandlers = new Set<() => void>()
let source: EventSource | null = null
let lastEventId = ''
let renewTimer: ReturnType<typeof setTimeout> | undefined
const seen = new SeenEvents()

function dispatch(type: string, message: MessageEvent<string>): void {
  if (message.lastEventId) lastEventId = message.lastEventId
  let parsed: StreamEvent
  try {
    const body = JSON.parse(message.data) as Omit<StreamEvent, 'id'>
    parsed = { ...body, id: message.lastEventId, type }
  } catch {
    return
  }
  if (!seen.first(parsed.event_id)) return
  for (const handler of handlers.get(type) ?? []) handler(parsed)
  for (const handler of handlers.get('*') ?? []) handler(parsed)
}

function open(): void {
  close()
  if (!session.signedIn) return
  const query = new URLSearchParams({ access_token: session.accessToken })
  if (lastEventId) query.set('last_event_id', lastEventId)
  streamStatus.value = 'connecting'
  const es = new EventSource(`/api/v1/stream?${query}`)
  source = es
  es.onopen = () => (streamStatus.value = 'live')
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) {
      // Refused (an expired token answers 401): renew the token, then open a new one.
      streamStatus.value = 'offline'
      setTimeout(() => void renew(), 2000 + Math.random() * 2000)
    } else {
      streamStatus.value = 'connecting'
    }
  }
  for (const type of EVENT_TYPES) es.addEventListener(type, (m) => dispatch(type, m as MessageEvent<string>))
  es.addEventListener('reset', () => resetHandlers.forEach((h) => h()))
  scheduleRenewal()
}

function close(): void {
  source?.close()
  source = null
  clearTimeout(renewTimer)
  streamStatus.value = 'offline'
}

/** The token in the stream's URL expires: reconnect with a fresh one a minute before. */
function scheduleRenewal(): void {
  clearTimeout(renewTimer)
  const due = session.accessExpiresAt - Date.now() - 60_000
  renewTimer = setTimeout(() => void renew(), Math.max(due, 5_000))
}

async function renew(): Promise<void> {
  if (!session.signedIn) return close()
  if (session.accessExpiresAt - Date.now() < 90_000 && !(await session.refresh())) return close()
  open()
}

export const stream = {
  start: open,
  stop(): void {
    close()
    lastEventId = ''
  },
  /** Call `handler` for each event of these types ('*': all); returns the unsubscribe. */
  on(types: string | readonly string[], handler: Handler): () => void {
    const list = typeof types === 'string' ? [types] : types
    for (const type of list) {
      if (!handlers.has(type)) handlers.set(type, new Set())
      handlers.get(type)!.add(handler)
    }
    return () => list.forEach((type) => handlers.get(type)?.delete(handler))
  },
  /** The stream could not replay what was missed: reload state. */
  onReset(handler: () => void): () => void {
    resetHandlers.add(handler)
    return () => resetHandlers.delete(handler)
  },
}
