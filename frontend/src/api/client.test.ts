import { afterEach, describe, expect, it, vi } from 'vitest'
import { ApiError, api, unwrap } from './client'
import { session } from '../session'

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

afterEach(() => {
  vi.unstubAllGlobals()
  session.clear()
})

describe('ApiError', () => {
  it('lists the fields a 422 names', () => {
    const err = new ApiError(422, 'validation_failed', 'The request is not valid', {
      in: 'body',
      errors: { start: ['Not a valid datetime.'], gpus: { 0: ['Unknown GPU.'] } },
    })
    expect(err.reason).toBe('The request is not valid (start: Not a valid datetime.; gpus.0: Unknown GPU.)')
  })
})

describe('unwrap', () => {
  it('throws the envelope of a refusal', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json(409, { error: 'reservation_conflict', message: 'GPU taken', details: { id: 3 } })))
    const err = await unwrap(api.GET('/api/v1/me')).catch((e) => e)
    expect(err).toBeInstanceOf(ApiError)
    expect(err).toMatchObject({ status: 409, code: 'reservation_conflict', message: 'GPU taken' })
  })

  it('refreshes an expired access token once and retries', async () => {
    session.adopt({ access_token: 'old', refresh_token: 'r1', expires_in: 900, refresh_expires_at: '', token_type: 'Bearer', user: { username: 'alice', email: '', groups: [], roles: [], created_at: '' } })
    const seen: string[] = []
    vi.stubGlobal('fetch', vi.fn(async (input: Request | string, init?: RequestInit) => {
      if (typeof input === 'string') {
        expect(JSON.parse(String(init?.body))).toEqual({ refresh_token: 'r1' })
        return json(200, { access_token: 'new', refresh_token: 'r2', expires_in: 900, refresh_expires_at: '', token_type: 'Bearer', user: session.user })
      }
      seen.push(input.headers.get('Authorization') ?? '')
      return input.headers.get('Authorization') === 'Bearer new' ? json(200, { user: session.user }) : json(401, { error: 'authentication_required', message: 'expired', details: {} })
    }))
    const me = await unwrap(api.GET('/api/v1/me'))
    expect(me.user.username).toBe('alice')
    expect(seen).toEqual(['Bearer old', 'Bearer new'])
    expect(session.refreshToken).toBe('r2')
  })

  it('signs out when the refresh token is refused', async () => {
    session.adopt({ access_token: 'old', refresh_token: 'r1', expires_in: 900, refresh_expires_at: '', token_type: 'Bearer', user: { username: 'alice', email: '', groups: [], roles: [], created_at: '' } })
    vi.stubGlobal('fetch', vi.fn(async () => json(401, { error: 'authentication_failed', message: 'no', details: {} })))
    await expect(unwrap(api.GET('/api/v1/me'))).rejects.toMatchObject({ status: 401 })
    expect(session.signedIn).toBe(false)
  })
})
