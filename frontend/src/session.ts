// Who is signed in: tokens kept in localStorage (so a reload or a second tab stays signed in),
// refreshed on demand, one refresh at a time.
import { reactive } from 'vue'
import type { components } from './api/schema'

type User = components['schemas']['User']
type Tokens = components['schemas']['Tokens']

const STORAGE_KEY = 'warden.session'

interface Stored {
  accessToken: string
  refreshToken: string
  accessExpiresAt: number // ms since the epoch
  user: User
}

function load(): Stored | null {
  try {
    const raw = localStorage.getItem(STORAGE_KEY)
    return raw ? (JSON.parse(raw) as Stored) : null
  } catch {
    return null
  }
}

let refreshing: Promise<boolean> | null = null

export const session = reactive({
  accessToken: '',
  refreshToken: '',
  accessExpiresAt: 0,
  user: null as User | null,

  get signedIn(): boolean {
    return this.user !== null && this.refreshToken !== ''
  },
  get isAdmin(): boolean {
    return this.user?.roles.includes('admin') ?? false
  },

  restore(): void {
    const stored = load()
    if (stored) Object.assign(this, stored)
  },

  adopt(tokens: Tokens): void {
    this.accessToken = tokens.access_token
    this.refreshToken = tokens.refresh_token
    this.accessExpiresAt = Date.now() + tokens.expires_in * 1000
    this.user = tokens.user
    this.save()
  },

  save(): void {
    const stored: Stored = {
      accessToken: this.accessToken,
      refreshToken: this.refreshToken,
      accessExpiresAt: this.accessExpiresAt,
      user: this.user as User,
    }
    localStorage.setItem(STORAGE_KEY, JSON.stringify(stored))
  },

  clear(): void {
    this.accessToken = ''
    this.refreshToken = ''
    this.accessExpiresAt = 0
    this.user = null
    localStorage.removeItem(STORAGE_KEY)
  },

  /** A new access token from the refresh token; false (and signed out) when refused. */
  refresh(): Promise<boolean> {
    if (refreshing) return refreshing
    const token = this.refreshToken
    refreshing = (async () => {
      try {
        const response = await fetch('/api/v1/session/refresh', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ refresh_token: token }),
        })
        if (response.ok) {
          this.adopt((await response.json()) as Tokens)
          return true
        }
        // Another tab may have rotated it already: take its tokens if they are newer.
        const stored = load()
        if (stored && stored.refreshToken !== token) {
          Object.assign(this, stored)
          return true
        }
        if (response.status === 401) this.clear()
        return false
      } catch {
        return false
      } finally {
        refreshing = null
      }
    })()
    return refreshing
  },
})

session.restore()
window.addEventListener('storage', (event) => {
  if (event.key !== STORAGE_KEY) return
  const stored = load()
  if (stored) Object.assign(session, stored)
  else session.clear()
})
