// The first run's checklist on the dashboard: each step is ticked from the real state, so it
// ticks itself as the admin goes (a host added, a colleague invited, alerts set up, a booking).

export interface StartState {
  hosts: number
  users: number
  alertsConfigured: boolean
  reservations: number
}

export interface Step {
  key: 'host' | 'people' | 'alerts' | 'book'
  label: string
  done: boolean
  /** where to do it: a page of the app */
  to: string
  hint: string
}

export function startSteps(state: StartState): Step[] {
  return [
    {
      key: 'host',
      label: 'Add a host',
      done: state.hosts > 0,
      to: '/admin/hosts',
      hint: 'a GPU server Warden logs in to over SSH; its GPUs show here within one poll',
    },
    {
      key: 'people',
      label: 'Invite people',
      done: state.users > 1,
      to: '/admin/users',
      hint: 'an account for each colleague who books or uses the GPUs',
    },
    {
      key: 'alerts',
      label: 'Set up alerts',
      done: state.alertsConfigured,
      to: '/admin/settings',
      hint: 'e-mail or a chat webhook, so that a squatted GPU reaches someone',
    },
    {
      key: 'book',
      label: 'Book a GPU',
      done: state.reservations > 0,
      to: '/reservations',
      hint: 'a reservation on the calendar: Warden then guards it',
    },
  ]
}
