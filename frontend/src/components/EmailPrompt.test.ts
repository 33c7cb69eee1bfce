import { afterEach, describe, expect, it, vi } from 'vitest'
import { flushPromises, mount } from '@vue/test-utils'
import { session } from '../session'
import EmailPrompt from './EmailPrompt.vue'

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

const carol = { username: 'carol', email: '', roles: ['user'], groups: [], source: 'local', created_at: '2026-11-27T18:00:00Z' }

function signIn(email: string): void {
  session.accessToken = 'token'
  session.refreshToken = 'refresh'
  session.accessExpiresAt = Date.now() + 3_600_000
  session.user = { ...carol, email } as typeof session.user
}

afterEach(() => {
  vi.unstubAllGlobals()
  sessionStorage.clear()
  session.clear()
})

describe('the e-mail prompt after sign-in', () => {
  it('asks an account without an address and saves the one given as its own', async () => {
    signIn('')
    const sent: { method: string; path: string; body: unknown }[] = []
    vi.stubGlobal('fetch', vi.fn(async (request: Request) => {
      const text = await request.text()
      sent.push({ method: request.method, path: new URL(request.url, 'http://x').pathname, body: JSON.parse(text) })
      return json(200, { ...carol, email: 'carol@lab.example' })
    }))
    const wrapper = mount(EmailPrompt)
    expect(wrapper.find('[data-testid="email-prompt"]').exists()).toBe(true)
    await wrapper.find('[data-testid="email-prompt-address"]').setValue('carol@lab.example')
    await wrapper.find('form').trigger('submit')
    await flushPromises()
    expect(sent).toEqual([{ method: 'PATCH', path: '/api/v1/users/carol', body: { email: 'carol@lab.example' } }])
    expect(session.user?.email).toBe('carol@lab.example')
    expect(wrapper.find('[data-testid="email-prompt"]').exists()).toBe(false)
  })

  it('says nothing to an account with an address, and "Not now" holds for the browser session', async () => {
    signIn('carol@lab.example')
    expect(mount(EmailPrompt).find('[data-testid="email-prompt"]').exists()).toBe(false)
    signIn('carol@localhost') // the first run's placeholder: nobody reads it
    expect(mount(EmailPrompt).find('[data-testid="email-prompt"]').exists()).toBe(true)
    signIn('')
    const wrapper = mount(EmailPrompt)
    await wrapper.findAll('button').find((b) => b.text() === 'Not now')!.trigger('click')
    expect(wrapper.find('[data-testid="email-prompt"]').exists()).toBe(false)
    expect(mount(EmailPrompt).find('[data-testid="email-prompt"]').exists()).toBe(false)
  })
})
