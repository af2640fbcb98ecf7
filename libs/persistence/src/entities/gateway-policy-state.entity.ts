import { Column, Entity, PrimaryColumn } from 'typeorm';
import { idColumn, timeColumn } from './columns';

/**
 * The newest policy version a gateway has seen activated, per deployment. Kept in the database
 * (not only in the instance that consumed policy_version.activated) so every gateway instance
 * gates admissions on the same current version.
 */
@Entity({ name: 'gateway_policy_state' })
export class GatewayPolicyState {
  @PrimaryColumn({ ...idColumn, name: 'deployment', primaryKeyConstraintName: 'pk_gateway_policy_state' })
  deployment!: string;

  @Column({ name: 'version', type: 'integer' })
  version!: number;

  @Column({ ...timeColumn, name: 'updated_at' })
  updatedAt!: Date;
}
